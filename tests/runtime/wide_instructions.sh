#!/bin/sh
# A build runs on any x86-64 CPU only if no code outside the per-ISA kernel
# variants (src/runtime/kernels/isa.h, and gemm.cc's micro-kernels) holds an
# AVX or AVX-512 instruction: such code runs whatever the CPU, and dies with
# SIGILL where the CPU lacks it. This disassembles each binary given and
# fails naming every such function. It also fails unless the variants are
# there: the avx512 one using 512-bit registers and the avx2 one 256-bit.
set -eu
status=0
for binary in "$@"; do
  objdump -d -C --no-show-raw-insn "$binary" | awk -v binary="$binary" '
    /^[0-9a-f]+ <.*>:$/ { name = substr($0, index($0, "<") + 1); next }
    # VEX / EVEX encoded (v...), AVX-512 mask registers, 256 / 512-bit registers.
    /:\t(v[a-z]|k(mov|and|or|xor|not|test|shift|unpck|add))|%[yz]mm|%k[0-7]/ {
      if (name ~ /isa_avx512::/ && /%zmm/) zmm++
      if (name ~ /isa_avx2::/ && /%ymm/) ymm++
      if (name !~ /isa_avx2::|isa_avx512::|Avx2|Avx512/ && !(name in reported)) {
        reported[name] = 1
        printf "%s: %s holds a wide instruction outside the kernel variants: %s\n", binary, name, $0
        bad++
      }
    }
    END {
      if (!zmm) printf "%s: no isa_avx512 function uses a 512-bit register\n", binary
      if (!ymm) printf "%s: no isa_avx2 function uses a 256-bit register\n", binary
      if (bad || !zmm || !ymm) exit 1
      printf "%s: wide instructions only in the kernel variants\n", binary
    }' || status=1
done
exit $status

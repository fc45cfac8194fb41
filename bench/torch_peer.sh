# Sourced by the benchmark scripts that run the PyTorch peer in a process of
# its own: the peer at its best on this machine.
#
# run_torch_peer OUT THREADS CORETYPE COMMAND...
#   runs COMMAND with OPENBLAS_L2_SIZE unset, OPENBLAS_CORETYPE unset (the
#   CORETYPE "unset": OpenBLAS chooses by cpuid) or set to CORETYPE, passive
#   OpenMP waits and THREADS OpenBLAS / OpenMP threads, its output into OUT.
#   A core type the CPU cannot run leaves no OUT (the caller skips it); a
#   command that failed after writing output stops the script.
run_torch_peer() {
  local out=$1 threads=$2 ct=$3
  shift 3
  local core
  if [ "$ct" = unset ]; then core=(-u OPENBLAS_CORETYPE); else core=(OPENBLAS_CORETYPE="$ct"); fi
  env -u OPENBLAS_L2_SIZE "${core[@]}" OMP_WAIT_POLICY=passive \
    OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" "$@" >"$out" ||
    { [ -s "$out" ] && exit 1; rm -f "$out"; }
}

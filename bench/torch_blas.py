"""Which BLAS a torch process runs on, for the peers of the benchmarks.

Debian's python3-torch loads whatever libblas.so.3 the alternatives system
points at; Debian's reference BLAS (libblas3) runs a 1024^3 product at about
7 GFLOP/s, thirty times below OpenBLAS, and a benchmark against it measures
nothing. `require_optimized_blas()` exits with an error naming the library
when the process did not load OpenBLAS (scripts/install-bench-deps.sh
installs it). It looks at the process's own mappings after a product, so it
sees the library torch really loaded.
"""
import sys

import torch


def loaded_blas():
    """The path of the BLAS library mapped into this process ('' if none)."""
    torch.ones(64, 64) @ torch.ones(64, 64)  # make sure the library is in use
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and ("blas" in parts[5] or "mkl" in parts[5]):
                paths.add(parts[5])
    return " ".join(sorted(paths))


def require_optimized_blas():
    blas = loaded_blas()
    # The libblas.so.3 torch links to provides sgemm_ (another library mapped
    # beside it, such as OpenBLAS's LAPACK, does not make the products fast).
    generic = [p for p in blas.split() if p.rsplit("/", 1)[-1].startswith("libblas")]
    fast = ("openblas" in blas or "mkl" in blas) and all(
        "openblas" in p or "mkl" in p for p in generic)
    if fast:
        return blas
    sys.exit(f"error: torch runs on {blas or 'no BLAS library'}, not OpenBLAS: its numbers "
             "would not be the peer at its best. Run scripts/install-bench-deps.sh (Debian's "
             "libopenblas0-pthread), or point libblas.so.3 at OpenBLAS with update-alternatives.")

// attention.cc built for avx512 (kernels/isa.h).
#define STRATA_KERNEL_ISA 2
#include "kernels/attention.cc"

// attention.cc built for avx2 (kernels/isa.h).
#define STRATA_KERNEL_ISA 1
#include "kernels/attention.cc"

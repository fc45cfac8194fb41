// Everything a program written against strata usually needs, in one
// include: lazy tensors and their ops, autodiff, scan, the nn modules and
// optimizers, and safetensors / config.json files. The program IR (hlo/),
// the runtime, SPMD partitioning and many processes (distributed/) have
// headers of their own.
#pragma once

#include "strata/autograd/grad.h"
#include "strata/core/dtype.h"
#include "strata/core/error.h"
#include "strata/core/shape.h"
#include "strata/io/llama_config.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/lazy/tensor.h"
#include "strata/lazy/tree.h"
#include "strata/nn/apply_layers.h"
#include "strata/nn/functional.h"
#include "strata/nn/layers.h"
#include "strata/nn/llama.h"
#include "strata/nn/module.h"
#include "strata/nn/optim.h"
#include "strata/nn/sharding_plan.h"
#include "strata/nn/tensor_files.h"
#include "strata/runtime/trace.h"
#include "strata/transforms/scan.h"

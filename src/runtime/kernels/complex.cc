// Kernels of the complex types (c64, c128): XLA's complex arithmetic, the
// parts (real, imag) and their assembly (complex), EQ / NE compares and
// select. Data movement, reductions through a computation and the dots use
// the generic kernels; these are the ops whose scalar meaning differs.
#include <cmath>
#include <complex>
#include <cstring>

#include "kernels/kernels.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;

// expm1 and log1p keep their accuracy near 0, as the real ones do:
// e^(x+iy) - 1 = (expm1(x) cos y - 2 sin^2(y/2)) + i e^x sin y, and
// log(1 + z) = log1p(2x + x^2 + y^2) / 2 + i atan2(y, 1 + x).
template <typename P>
std::complex<P> Expm1(std::complex<P> z) {
  const P x = z.real(), y = z.imag();
  const P half_sin = std::sin(y / 2);
  return {std::expm1(x) * std::cos(y) - 2 * half_sin * half_sin, std::exp(x) * std::sin(y)};
}
template <typename P>
std::complex<P> Log1p(std::complex<P> z) {
  const P x = z.real(), y = z.imag();
  return {std::log1p(2 * x + x * x + y * y) / 2, std::atan2(y, 1 + x)};
}

template <typename P>
std::complex<P> Unary(Opcode op, std::complex<P> z) {
  using C = std::complex<P>;
  switch (op) {
    case Opcode::kNegate:
      return -z;
    case Opcode::kSign: {  // z / |z|, and 0 at 0
      const P r = std::abs(z);
      return r == 0 ? C(0) : z / r;
    }
    case Opcode::kExp:
      return std::exp(z);
    case Opcode::kExpm1:
      return Expm1(z);
    case Opcode::kLog:
      return std::log(z);
    case Opcode::kLog1p:
      return Log1p(z);
    case Opcode::kTanh:
      return std::tanh(z);
    case Opcode::kLogistic:
      return C(1) / (C(1) + std::exp(-z));
    case Opcode::kSqrt:
      return std::sqrt(z);
    case Opcode::kRsqrt:
      return C(1) / std::sqrt(z);
    case Opcode::kSin:
      return std::sin(z);
    case Opcode::kCos:
      return std::cos(z);
    default:
      Fail("[runtime] {} has no complex kernel", hlo::OpcodeName(op));
  }
}

template <typename P>
std::complex<P> Binary(Opcode op, std::complex<P> a, std::complex<P> b) {
  using C = std::complex<P>;
  switch (op) {
    case Opcode::kAdd:
      return a + b;
    case Opcode::kSubtract:
      return a - b;
    case Opcode::kMultiply:
      return a * b;
    case Opcode::kDivide:
      return a / b;
    case Opcode::kPower:  // z^0 is 1 for every z, 0 included
      return b == C(0) ? C(1) : std::pow(a, b);
    default:
      Fail("[runtime] {} has no complex kernel", hlo::OpcodeName(op));
  }
}

// Element i of operand k, which may be a scalar broadcast (read as element 0).
template <typename T>
struct Operand {
  const T* data;
  int64_t stride;
  T operator[](int64_t i) const { return data[i * stride]; }
};

template <typename P>
Kernel ComplexKernel(const hlo::Instruction& inst, ThreadPool* pool) {
  using C = std::complex<P>;
  const Opcode op = inst.opcode();
  const int64_t n = inst.shape().num_elements();
  std::vector<int64_t> strides;
  for (const hlo::Instruction* operand : inst.operands())
    strides.push_back(IsScalarBroadcast(*operand) ? 0 : 1);
  auto in = [strides](const KernelArgs& a, int64_t k) {
    return Operand<C>{reinterpret_cast<const C*>(a.operands[k]), strides[k]};
  };
  auto each = [pool, n](auto body) {
    pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) body(i);
    });
  };
  if (op == Opcode::kAbs || op == Opcode::kReal || op == Opcode::kImag) {
    return [=](const KernelArgs& a) {
      const Operand<C> x = in(a, 0);
      auto* out = reinterpret_cast<P*>(a.outputs[0]);
      each([&](int64_t i) {
        out[i] = op == Opcode::kAbs    ? std::abs(x[i])
                 : op == Opcode::kReal ? x[i].real()
                                       : x[i].imag();
      });
    };
  }
  if (op == Opcode::kCompare) {
    const bool equal = inst.direction == hlo::Comparison::kEq;
    return [=](const KernelArgs& a) {
      const Operand<C> x = in(a, 0), y = in(a, 1);
      auto* out = reinterpret_cast<bool*>(a.outputs[0]);
      each([&](int64_t i) { out[i] = (x[i] == y[i]) == equal; });
    };
  }
  if (op == Opcode::kSelect) {
    const bool scalar_pred = inst.operand(0)->shape().is_scalar();
    return [=](const KernelArgs& a) {
      const auto* p = reinterpret_cast<const bool*>(a.operands[0]);
      const Operand<C> x = in(a, 1), y = in(a, 2);
      auto* out = reinterpret_cast<C*>(a.outputs[0]);
      each([&](int64_t i) { out[i] = p[scalar_pred ? 0 : i] ? x[i] : y[i]; });
    };
  }
  if (hlo::IsElementwiseUnary(op)) {
    return [=](const KernelArgs& a) {
      const Operand<C> x = in(a, 0);
      auto* out = reinterpret_cast<C*>(a.outputs[0]);
      each([&](int64_t i) { out[i] = Unary<P>(op, x[i]); });
    };
  }
  return [=](const KernelArgs& a) {
    const Operand<C> x = in(a, 0), y = in(a, 1);
    auto* out = reinterpret_cast<C*>(a.outputs[0]);
    each([&](int64_t i) { out[i] = Binary<P>(op, x[i], y[i]); });
  };
}

// complex(re, im), and real / imag of a real operand (the value and 0).
template <typename P>
Kernel PartsKernel(const hlo::Instruction& inst, ThreadPool* pool) {
  const Opcode op = inst.opcode();
  const int64_t n = inst.shape().num_elements();
  if (op == Opcode::kComplex) {
    return [=](const KernelArgs& a) {
      const auto* re = reinterpret_cast<const P*>(a.operands[0]);
      const auto* im = reinterpret_cast<const P*>(a.operands[1]);
      auto* out = reinterpret_cast<std::complex<P>*>(a.outputs[0]);
      pool->ParallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[i] = {re[i], im[i]};
      });
    };
  }
  const int64_t bytes = inst.shape().byte_size();
  return [=](const KernelArgs& a) {
    if (op == Opcode::kImag) {
      std::memset(a.outputs[0], 0, bytes);
    } else if (a.outputs[0] != a.operands[0]) {
      std::memcpy(a.outputs[0], a.operands[0], bytes);
    }
  };
}

}  // namespace

bool RunsOnComplexKernels(const hlo::Instruction& inst) {
  const Opcode op = inst.opcode();
  if (hlo::KernelOf(op) == hlo::Kernel::kComplex) return true;  // real, imag, complex
  const bool elementwise = hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op) ||
                           op == Opcode::kCompare || op == Opcode::kSelect;
  const int64_t operand = op == Opcode::kSelect ? 1 : 0;
  return elementwise && inst.operand_count() > operand &&
         IsComplex(inst.operand(operand)->shape().dtype());
}

KernelInfo MakeComplexKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  const Opcode op = inst.opcode();
  if (op == Opcode::kComplex) {
    if (inst.shape().dtype() == DType::kC128) return {PartsKernel<double>(inst, &pool)};
    return {PartsKernel<float>(inst, &pool)};
  }
  if ((op == Opcode::kReal || op == Opcode::kImag) && !IsComplex(inst.operand(0)->shape().dtype()))
    return {PartsKernel<float>(inst, &pool)};  // a copy or zeros, whatever the float type
  const DType t = inst.operand(op == Opcode::kSelect ? 1 : 0)->shape().dtype();
  if (t == DType::kC64) return {ComplexKernel<float>(inst, &pool)};
  return {ComplexKernel<double>(inst, &pool)};
}

}  // namespace strata::runtime

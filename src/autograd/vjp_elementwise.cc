// VJP rules of the elementwise ops. The unary and binary ops' rules are the
// vjp column of their rows in the opcode list (hlo/opcode.h); the helpers
// those rows name are here. convert, select and clamp follow.
#include <cmath>

#include "vjp_rules.h"

namespace strata::vjp_rules {
namespace {

// ---- what the rows' vjp column uses ------------------------------------------

template <typename... Cotangents>
std::vector<Tensor> Grads(Cotangents... cotangents) {
  return {std::move(cotangents)...};
}
std::vector<Tensor> NoGradient() { return {}; }
Tensor ZerosLike(const Tensor& x) { return Zeros(x.shape()); }

std::vector<Tensor> TanhVjp(const Tensor& g, const Tensor& x) {
  Tensor t = tanh(x);
  return {g * (1.0 - t * t)};
}
std::vector<Tensor> LogisticVjp(const Tensor& g, const Tensor& x) {
  Tensor s = sigmoid(x);
  return {g * s * (1.0 - s)};
}
std::vector<Tensor> ErfVjp(const Tensor& g, const Tensor& x) {
  return {g * (2.0 / std::sqrt(M_PI)) * exp(-(x * x))};
}
std::vector<Tensor> DivideVjp(const Tensor& g, const Tensor& a, const Tensor& b) {
  return {g / b, -(g * a) / (b * b)};
}
// Ties send the gradient to the first operand (`first`: where it won).
// As torch: a tie splits g in halves; an operand that loses gets none (a NaN
// neither wins nor loses: both get g).
std::vector<Tensor> MaxMinVjp(const Tensor& g, const Tensor& a_loses, const Tensor& b_loses,
                              const Tensor& tie) {
  Tensor zero = Zeros(g.shape());
  Tensor half = where(tie, g * 0.5, g);
  return {where(a_loses, zero, half), where(b_loses, zero, half)};
}
// d/db is p * log(a), taken as 0 where a == 0 and b >= 0 (0^b is constant
// there; torch does the same).
std::vector<Tensor> PowerVjp(const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor p = pow(a, b);
  Tensor zero = Zeros(g.shape());
  Tensor flat = logical_and(eq(a, zero), ge(b, zero));
  // d/da is b * a^(b-1), taken as 0 where b == 0 (a^0 is constant; at 0^0
  // the product would be 0 * inf), as torch.
  Tensor da = where(eq(b, zero), zero, g * b * pow(a, b - 1.0));
  return {da, where(flat, zero, g * p * log(where(flat, zero + 1.0, a)))};
}
// a - b * trunc(a / b), as HLO (C fmod).
std::vector<Tensor> RemainderVjp(const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor q = a / b;
  Tensor trunc = where(ge(q, Zeros(q.shape())), floor(q), ceil(q));
  return {g, -(g * trunc)};
}
std::vector<Tensor> Atan2Vjp(const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor r2 = a * a + b * b;
  return {g * b / r2, -(g * a) / r2};
}

// The rows: an op that takes floats has its vjp column, one taking none has
// no gradient (its values are integers or booleans).
#define STRATA_VJP_ROW(e, name, kind, ...) STRATA_VJP_ROW_##kind(e, __VA_ARGS__)
#define STRATA_VJP_ROW_Other(...)
#define STRATA_VJP_ROW_Collective(...)
#define STRATA_VJP_ROW_Unary(e, complex, api, types, float_kernel, integer_kernel, vector, vjp) \
  case Opcode::e: {                                                                             \
    if (!hlo::TakesFloats(hlo::ElementTypes::k##types)) return NoGradient();                    \
    const Tensor x = T(ops[0]);                                                                 \
    return vjp;                                                                                 \
  }
#define STRATA_VJP_ROW_Binary(e, complex, api, types, float_kernel, integer_kernel, vector, vjp) \
  case Opcode::e: {                                                                              \
    if (!hlo::TakesFloats(hlo::ElementTypes::k##types)) return NoGradient();                     \
    const Tensor a = T(ops[0]), b = T(ops[1]);                                                   \
    return vjp;                                                                                  \
  }

std::vector<Tensor> RowVjp(const ir::Node& node, const Tensor& g) {
  const auto& ops = node.operands();
  switch (node.opcode()) {
    STRATA_HLO_OPCODES(STRATA_VJP_ROW)
    default:
      break;
  }
  STRATA_CHECK(false, "{} is not an elementwise row", node.OpName());
  return {};
}

#undef STRATA_VJP_ROW
#undef STRATA_VJP_ROW_Other
#undef STRATA_VJP_ROW_Collective
#undef STRATA_VJP_ROW_Unary
#undef STRATA_VJP_ROW_Binary

}  // namespace

std::vector<Tensor> ElementwiseVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  if (hlo::IsElementwiseUnary(node.opcode()) || hlo::IsElementwiseBinary(node.opcode())) {
    std::vector<Tensor> in = RowVjp(node, g);
    in.resize(ops.size());  // none for an op without gradient
    return in;
  }
  auto operand = [&](size_t i) { return T(ops[i]); };
  std::vector<Tensor> in(ops.size());
  switch (node.opcode()) {
    case Opcode::kConvert:
      if (Differentiable(ops[0].shape())) in = {astype(g, ops[0].shape().dtype())};
      break;
    case Opcode::kSelect: {
      Tensor zero = Zeros(g.shape());
      in = {Tensor(), where(operand(0), g, zero), where(operand(0), zero, g)};
      break;
    }
    case Opcode::kClamp: {  // clamp(low, x, high)
      Tensor low = operand(0), x = operand(1), high = operand(2);
      Tensor zero = Zeros(g.shape());
      Tensor below = lt(x, low), above = gt(x, high);
      Tensor low_g = where(below, g, zero), high_g = where(above, g, zero);
      in = {ops[0].shape().rank() == 0 ? sum(low_g) : low_g,
            where(logical_or(below, above), zero, g),
            ops[2].shape().rank() == 0 ? sum(high_g) : high_g};
      break;
    }
    default:
      STRATA_CHECK(false, "{} has no rule among the elementwise VJPs", node.OpName());
  }
  return in;
}

}  // namespace strata::vjp_rules

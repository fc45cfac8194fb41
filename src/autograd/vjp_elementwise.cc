// VJP rules of elementwise ops (arithmetic, transcendental, select, clamp, convert): one case per
// opcode, written with the lazy ops.
#include <cmath>

#include "vjp_rules.h"

namespace strata::vjp_rules {

std::vector<Tensor> ElementwiseVjp(const RuleArgs& args) {
  const ir::Node& node = *args.owner;
  const auto& ops = node.operands();
  const Tensor& g = args.g;
  [[maybe_unused]] const Tensor& out = args.out;
  [[maybe_unused]] auto operand = [&](size_t i) { return T(ops[i]); };
  std::vector<Tensor> in(ops.size());
  switch (node.opcode()) {
    case Opcode::kAdd:
      in = {g, g};
      break;
    case Opcode::kSubtract:
      in = {g, -g};
      break;
    case Opcode::kMultiply:
      in = {g * operand(1), g * operand(0)};
      break;
    case Opcode::kDivide: {
      Tensor b = operand(1);
      in = {g / b, -(g * operand(0)) / (b * b)};
      break;
    }
    case Opcode::kNegate:
      in = {-g};
      break;
    case Opcode::kExp:
      in = {g * exp(operand(0))};
      break;
    case Opcode::kExpm1:
      in = {g * exp(operand(0))};
      break;
    case Opcode::kLog:
      in = {g / operand(0)};
      break;
    case Opcode::kLog1p:
      in = {g / (operand(0) + 1.0)};
      break;
    case Opcode::kTanh: {
      Tensor t = tanh(operand(0));
      in = {g * (1.0 - t * t)};
      break;
    }
    case Opcode::kLogistic: {
      Tensor s = sigmoid(operand(0));
      in = {g * s * (1.0 - s)};
      break;
    }
    case Opcode::kSqrt:
      in = {g * 0.5 / sqrt(operand(0))};
      break;
    case Opcode::kRsqrt:
      in = {g * -0.5 * rsqrt(operand(0)) / operand(0)};
      break;
    case Opcode::kSin:
      in = {g * cos(operand(0))};
      break;
    case Opcode::kCos:
      in = {-(g * sin(operand(0)))};
      break;
    case Opcode::kErf: {
      Tensor x = operand(0);
      in = {g * (2.0 / std::sqrt(M_PI)) * exp(-(x * x))};
      break;
    }
    case Opcode::kAbs:
      in = {g * sign(operand(0))};
      break;
    case Opcode::kSign:
    case Opcode::kFloor:
    case Opcode::kCeil:
    case Opcode::kRoundNearestEven:
      in = {Zeros(ops[0].shape())};
      break;
    case Opcode::kMaximum:
    case Opcode::kMinimum: {
      // Ties send the gradient to the first operand.
      Tensor a = operand(0), b = operand(1);
      Tensor first = node.opcode() == Opcode::kMaximum ? ge(a, b) : le(a, b);
      Tensor zero = Zeros(g.shape());
      in = {where(first, g, zero), where(first, zero, g)};
      break;
    }
    case Opcode::kPower: {
      // d/db is p * log(a), taken as 0 where a == 0 and b >= 0 (0^b is
      // constant there; torch does the same).
      Tensor a = operand(0), b = operand(1), p = pow(a, b);
      Tensor zero = Zeros(g.shape());
      Tensor flat = logical_and(eq(a, zero), ge(b, zero));
      in = {g * b * pow(a, b - 1.0), where(flat, zero, g * p * log(where(flat, zero + 1.0, a)))};
      break;
    }
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
    case Opcode::kRemainder: {  // a - b * trunc(a / b), as HLO (C fmod)
      Tensor q = operand(0) / operand(1);
      Tensor trunc = where(ge(q, Zeros(q.shape())), floor(q), ceil(q));
      in = {g, -(g * trunc)};
      break;
    }
    case Opcode::kAtan2: {  // atan2(a, b)
      Tensor a = operand(0), b = operand(1), r2 = a * a + b * b;
      in = {g * b / r2, -(g * a) / r2};
      break;
    }
    default:
      STRATA_CHECK(false, "{} has no rule among the elementwise VJPs", node.OpName());
  }
  return in;
}

}  // namespace strata::vjp_rules

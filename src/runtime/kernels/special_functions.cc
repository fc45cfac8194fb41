// The special functions of XLA's client library that strata runs as
// kernels (hlo/library_calls.h), elementwise over f32 or f64 operands,
// each computed in double:
// - polygamma(n, x): digamma for n = 0, else (-1)^(n+1) n! zeta(n+1, x)
//   (Hurwitz zeta by Euler-Maclaurin summation); NaN unless n is a
//   non-negative integer, and for x <= 0.
// - the regularized incomplete beta I_x(a, b): its continued fraction
//   (modified Lentz), through the symmetry I_x(a, b) = 1 - I_(1-x)(b, a)
//   where that converges faster; NaN for a, b <= 0 or x outside [0, 1].
// - IgammaGradA(a, x) = d/da P(a, x), P the regularized lower incomplete
//   gamma: P's series (x < a + 1) or its complement's continued fraction,
//   run on dual numbers that carry d/da along.
// - RandomGammaGrad(a, x) = -(dP/da) / (dP/dx): how a Gamma(a) sample x
//   moves with a (implicit reparameterization).
#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "strata/hlo/library_calls.h"

namespace strata::runtime {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;
constexpr double kEpsilon = 1e-16;
constexpr double kTiny = 1e-300;
constexpr int kIterations = 2000;

double Digamma(double x) {
  if (x <= 0 && x == std::floor(x)) return kNaN;  // a pole
  double result = 0;
  if (x < 0) {  // reflection: psi(x) = psi(1 - x) - pi / tan(pi x)
    result = -kPi / std::tan(kPi * x);
    x = 1 - x;
  }
  for (; x < 10; x += 1) result -= 1 / x;
  const double inv2 = 1 / (x * x);
  // ln x - 1/2x - sum B_2k / (2k x^2k), k = 1..7: the next term is below 1e-16 at x >= 10
  return result + std::log(x) - 0.5 / x -
         inv2 * (1.0 / 12 -
                 inv2 * (1.0 / 120 -
                         inv2 * (1.0 / 252 -
                                 inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760 -
                                                                                 inv2 / 12))))));
}

// Hurwitz zeta(s, q) for s > 1, q > 0: the first N terms summed, the rest
// by Euler-Maclaurin (B_2j / (2j)! for j = 1..7).
double HurwitzZeta(double s, double q) {
  if (!(s > 1) || !(q > 0)) return kNaN;
  constexpr int kTerms = 12;
  constexpr double kBernoulli[] = {1.0 / 12,           -1.0 / 720,     1.0 / 30240,
                                   -1.0 / 1209600,     1.0 / 47900160, -691.0 / 1307674368000.0,
                                   1.0 / 74724249600.0};
  double sum = 0;
  for (int k = 0; k < kTerms; ++k) sum += std::pow(q + k, -s);
  const double w = q + kTerms;
  sum += std::pow(w, 1 - s) / (s - 1) + 0.5 * std::pow(w, -s);
  double factor = s * std::pow(w, -s - 1);  // s (s+1) ... (s+2j-2) w^(-s-2j+1)
  for (int j = 1; j <= 7; ++j) {
    sum += kBernoulli[j - 1] * factor;
    factor *= (s + 2 * j - 1) * (s + 2 * j) / (w * w);
  }
  return sum;
}

double Polygamma(double n, double x) {
  if (!(n >= 0) || n != std::floor(n)) return kNaN;
  if (n == 0) return Digamma(x);
  const double sign = std::fmod(n, 2) == 0 ? -1 : 1;  // (-1)^(n+1)
  return sign * std::exp(std::lgamma(n + 1)) * HurwitzZeta(n + 1, x);
}

double IncompleteBeta(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return kNaN;
  if (x == 0 || x == 1) return x;
  if (x > (a + 1) / (a + b + 2)) return 1 - IncompleteBeta(b, a, 1 - x);
  const double front = std::exp(a * std::log(x) + b * std::log1p(-x) -
                                (std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b))) /
                       a;
  double f = 1, c = 1, d = 0;
  for (int i = 0; i <= kIterations; ++i) {
    const double m = i / 2;
    double numerator;
    if (i == 0) {
      numerator = 1;
    } else if (i % 2 == 0) {
      numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    } else {
      numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    }
    d = 1 + numerator * d;
    d = 1 / (std::abs(d) < kTiny ? kTiny : d);
    c = 1 + numerator / c;
    if (std::abs(c) < kTiny) c = kTiny;
    const double cd = c * d;
    f *= cd;
    if (std::abs(1 - cd) < kEpsilon) break;
  }
  return front * (f - 1);
}

// A number and its derivative in a.
struct Dual {
  double v = 0, d = 0;
};
Dual operator+(Dual p, Dual q) { return {p.v + q.v, p.d + q.d}; }
Dual operator-(Dual p, Dual q) { return {p.v - q.v, p.d - q.d}; }
Dual operator*(Dual p, Dual q) { return {p.v * q.v, p.d * q.v + p.v * q.d}; }
Dual operator/(Dual p, Dual q) { return {p.v / q.v, (p.d * q.v - p.v * q.d) / (q.v * q.v)}; }
Dual Exp(Dual p) { return {std::exp(p.v), std::exp(p.v) * p.d}; }
Dual Lgamma(Dual p) { return {std::lgamma(p.v), Digamma(p.v) * p.d}; }

// P(a, x) with its derivative in a; a > 0, x > 0.
Dual LowerGammaP(double a_value, double x) {
  const Dual a{a_value, 1};
  const Dual log_front = Dual{-x, 0} + a * Dual{std::log(x), 0} - Lgamma(a);
  if (x < a_value + 1) {  // sum x^n / (a (a+1) ... (a+n))
    Dual term = Dual{1, 0} / a, sum = term;
    for (int n = 1; n <= kIterations; ++n) {
      term = term * Dual{x, 0} / (a + Dual{double(n), 0});
      sum = sum + term;
      if (std::abs(term.v) < kEpsilon * std::abs(sum.v) &&
          std::abs(term.d) < kEpsilon * std::abs(sum.d) + kTiny) {
        break;
      }
    }
    return sum * Exp(log_front);
  }
  // Q's continued fraction (Lentz), then P = 1 - Q.
  Dual b = Dual{x + 1, 0} - a, c{1 / kTiny, 0}, d = Dual{1, 0} / b, h = d;
  for (int i = 1; i <= kIterations; ++i) {
    const Dual an = Dual{-double(i), 0} * (Dual{double(i), 0} - a);
    b = b + Dual{2, 0};
    d = an * d + b;
    if (std::abs(d.v) < kTiny) d.v = kTiny;
    c = b + an / c;
    if (std::abs(c.v) < kTiny) c.v = kTiny;
    d = Dual{1, 0} / d;
    const Dual delta = d * c;
    h = h * delta;
    if (std::abs(delta.v - 1) < kEpsilon && std::abs(delta.d) < kEpsilon) break;
  }
  return Dual{1, 0} - h * Exp(log_front);
}

double IgammaGradA(double a, double x) {
  if (!(a > 0) || !(x >= 0)) return kNaN;
  if (x == 0 || std::isinf(x)) return 0;
  return LowerGammaP(a, x).d;
}

double RandomGammaGrad(double a, double x) {
  if (!(a > 0) || !(x >= 0)) return kNaN;
  if (x == 0) return 0;
  const double density = std::exp(-x + (a - 1) * std::log(x) - std::lgamma(a));
  return -LowerGammaP(a, x).d / density;
}

template <typename T>
KernelInfo MakeTyped(hlo::LibraryCall call, int64_t n, ThreadPool* pool) {
  return {[=](const KernelArgs& args) {
    const T* p = reinterpret_cast<const T*>(args.operands[0]);
    const T* q = reinterpret_cast<const T*>(args.operands[1]);
    const T* r = call == hlo::LibraryCall::kRegularizedIncompleteBeta
                     ? reinterpret_cast<const T*>(args.operands[2])
                     : nullptr;
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    pool->ParallelFor(n, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double v;
        switch (call) {
          case hlo::LibraryCall::kPolygamma:
            v = Polygamma(p[i], q[i]);
            break;
          case hlo::LibraryCall::kRegularizedIncompleteBeta:
            v = IncompleteBeta(p[i], q[i], r[i]);
            break;
          case hlo::LibraryCall::kIgammaGradA:
            v = IgammaGradA(p[i], q[i]);
            break;
          default:
            v = RandomGammaGrad(p[i], q[i]);
            break;
        }
        out[i] = static_cast<T>(v);
      }
    });
  }};
}

}  // namespace

KernelInfo MakeLibraryCallKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  const hlo::LibraryCall call = *hlo::LibraryCallOf(inst.custom_call_target);
  const int64_t n = inst.shape().num_elements();
  if (inst.shape().dtype() == DType::kF64) return MakeTyped<double>(call, n, &pool);
  return MakeTyped<float>(call, n, &pool);
}

}  // namespace strata::runtime

// A tanh recurrence run as one compiled loop (scan) and differentiated,
// checked against a plain loop in double and its central finite
// differences. Exits 1 when they disagree.
#include <cmath>
#include <cstdio>
#include <vector>

#include "strata/strata.h"

using namespace strata;

constexpr int kSteps = 50, kWidth = 3;

// h <- tanh(h W + x_t), loss = sum(h_T^2), all in double.
double PlainLoss(const std::vector<double>& w, const std::vector<double>& xs) {
  std::vector<double> h(kWidth, 0.0);
  for (int t = 0; t < kSteps; ++t) {
    std::vector<double> next(kWidth);
    for (int j = 0; j < kWidth; ++j) {
      double a = xs[t * kWidth + j];
      for (int i = 0; i < kWidth; ++i) a += h[i] * w[i * kWidth + j];
      next[j] = std::tanh(a);
    }
    h = next;
  }
  double loss = 0;
  for (double v : h) loss += v * v;
  return loss;
}

int main() {
  std::vector<float> w(kWidth * kWidth), xs(kSteps * kWidth);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3f * std::sin(1.0f + i);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.5f * std::cos(0.7f * i);

  Tensor weights = Tensor::FromVector<float>(w, {kWidth, kWidth});
  Tensor inputs = Tensor::FromVector<float>(xs, {kSteps, 1, kWidth});
  auto [carry, ys] = scan(
      [&](const Tree& h, const Tree& x) {
        Tensor next = tanh(matmul(h.leaf(), weights) + x.leaf());
        return std::pair{Tree(next), Tree(next)};
      },
      Tree(zeros({1, kWidth})), Tree(inputs));
  Tensor loss = sum(carry.leaf() * carry.leaf());
  std::vector<float> dw = gradients(loss, {weights})[0].to_vector<float>();

  const std::vector<double> wd(w.begin(), w.end()), xd(xs.begin(), xs.end());
  const double expected = PlainLoss(wd, xd);
  const double got = loss.to_vector<float>()[0];
  int bad = std::abs(got - expected) > 1e-5 * std::max(1.0, expected);
  std::printf("loss: strata %.7f, plain loop %.7f\n", got, expected);
  for (size_t i = 0; i < w.size(); ++i) {
    std::vector<double> up = wd, down = wd;
    up[i] += 1e-6;
    down[i] -= 1e-6;
    const double fd = (PlainLoss(up, xd) - PlainLoss(down, xd)) / 2e-6;
    bad += std::abs(dw[i] - fd) > 1e-4 * std::max(1.0, std::abs(fd));
    std::printf("dloss/dw[%zu]: strata %+.6f, finite differences %+.6f\n", i, dw[i], fd);
  }
  std::printf("%s\n", bad ? "MISMATCH" : "ok");
  return bad ? 1 : 0;
}

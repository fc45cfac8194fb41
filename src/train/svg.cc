// The loss curve of `strata train` as a standalone SVG (no plotting library).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "strata/train/trainer.h"

namespace strata::train {
namespace {

// About `target` round tick values (1, 2 or 5 times a power of ten) covering
// [lo, hi].
std::vector<double> Ticks(double lo, double hi, int target) {
  double span = hi - lo;
  if (!(span > 0)) return {lo};
  double raw = span / target;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (span / step <= target) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string LossCurveSvg(const std::vector<StepStats>& history, const std::vector<EvalPoint>& evals,
                         const std::string& title) {
  const double width = 720, height = 420;
  const double left = 64, right = 20, top = 40, bottom = 52;
  const double plot_w = width - left - right, plot_h = height - top - bottom;

  double max_step = 1, lo = INFINITY, hi = -INFINITY;
  for (const StepStats& s : history) {
    if (!std::isfinite(s.loss)) continue;
    max_step = std::max(max_step, static_cast<double>(s.step));
    lo = std::min(lo, static_cast<double>(s.loss));
    hi = std::max(hi, static_cast<double>(s.loss));
  }
  for (const EvalPoint& e : evals) {
    if (!std::isfinite(e.loss)) continue;
    max_step = std::max(max_step, static_cast<double>(e.step));
    lo = std::min(lo, static_cast<double>(e.loss));
    hi = std::max(hi, static_cast<double>(e.loss));
  }
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-6) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.05;
  lo = std::max(0.0, lo - pad);
  hi += pad;
  auto x = [&](double step) { return left + plot_w * step / max_step; };
  auto y = [&](double loss) { return top + plot_h * (hi - loss) / (hi - lo); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{3}</text>\n",
      width, height, left + plot_w / 2, Escape(title));
  // Grid and tick labels.
  for (double t : Ticks(lo, hi, 6)) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        left, left + plot_w, y(t), left - 6, y(t) + 4, t);
  }
  for (double t : Ticks(0, max_step, 8)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        x(t), top, top + plot_h, top + plot_h + 16, t);
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">"
      "loss (nats per byte)</text>\n",
      left, top, plot_w, plot_h, left + plot_w / 2, height - 12, top + plot_h / 2);

  // Raw training loss (faint) and its exponential moving average.
  std::string raw, smooth;
  double ema = 0, weight = 0;
  for (const StepStats& s : history) {
    if (!std::isfinite(s.loss)) continue;
    raw += fmt::format("{}{:.1f},{:.1f}", raw.empty() ? "" : " ", x(s.step), y(s.loss));
    ema = 0.9 * ema + 0.1 * s.loss;
    weight = 0.9 * weight + 0.1;  // bias-corrected, as Adam's moments
    smooth += fmt::format("{}{:.1f},{:.1f}", smooth.empty() ? "" : " ", x(s.step), y(ema / weight));
  }
  if (!raw.empty()) {
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\"/>\n", raw);
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#08519c\" stroke-width=\"2\"/>\n", smooth);
  }
  std::string eval_line;
  for (const EvalPoint& e : evals) {
    if (!std::isfinite(e.loss)) continue;
    eval_line += fmt::format("{}{:.1f},{:.1f}", eval_line.empty() ? "" : " ", x(e.step), y(e.loss));
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#d94801\"/>\n",
                       x(e.step), y(e.loss));
  }
  if (!eval_line.empty()) {
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#d94801\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"4 3\"/>\n",
        eval_line);
  }
  // Legend.
  const double lx = left + plot_w - 170, ly = top + 14;
  svg += fmt::format(
      "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"#08519c\" stroke-width=\"2\"/>"
      "<text x=\"{3}\" y=\"{4}\">training (smoothed)</text>\n"
      "<circle cx=\"{5}\" cy=\"{6}\" r=\"3.5\" fill=\"#d94801\"/>"
      "<text x=\"{3}\" y=\"{7}\">held-out</text>\n",
      lx, lx + 24, ly, lx + 30, ly + 4, lx + 12, ly + 18, ly + 22);
  svg += "</svg>\n";
  return svg;
}

}  // namespace strata::train

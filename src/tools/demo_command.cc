// `strata demo`: the main job until training lands. Builds a program with a
// while loop, a reduction and a dot, prints its HLO text, compiles and runs it.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>

#include "commands.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"
#include "strata/runtime/cpu.h"

namespace strata::tools {

int ListDevices() {
  const runtime::Client& client = runtime::Client::Default();
  for (int i = 0; i < client.device_count(); ++i) fmt::print("{}\n", client.device(i)->ToString());
  fmt::print("kernels: {} (this CPU runs up to {}; STRATA_ISA caps it)\n",
             runtime::IsaName(runtime::KernelIsa()), runtime::IsaName(runtime::CpuIsa()));
  fmt::print("bf16 dots: {}\n", runtime::PairedBf16Dots()
                                    ? "vdpbf16ps pairs"
                                    : "operands widened to f32 as they are packed");
  return 0;
}

int RunDemo() {
  using hlo::Builder;
  hlo::Module m("demo");
  Shape f32 = Shape::Scalar(DType::kF32);
  Shape s64 = Shape::Scalar(DType::kS64);
  Shape row(DType::kF32, {4});
  auto* add =
      m.AddComputation(hlo::MakeScalarBinaryComputation("add", hlo::Opcode::kAdd, DType::kF32));

  // Loop state (i, x): ten times x <- tanh(W x + 0.1 i).
  Shape state = Shape::Tuple({s64, row, Shape(DType::kF32, {4, 4})});
  Builder cb("cond");
  {
    auto* s = cb.Parameter(0, state, "s");
    m.AddComputation(cb.Build(cb.Compare(cb.GetTupleElement(s, 0), cb.ConstantScalar<int64_t>(10),
                                         hlo::Comparison::kLt)));
  }
  auto* cond = m.computations().back().get();
  Builder bb("body");
  {
    auto* s = bb.Parameter(0, state, "s");
    auto* i = bb.GetTupleElement(s, 0);
    auto* x = bb.GetTupleElement(s, 1);
    auto* w = bb.GetTupleElement(s, 2);
    hlo::DotDims dims;
    dims.lhs_contracting = {1};
    dims.rhs_contracting = {0};
    auto* wx = bb.Dot(w, x, dims);
    auto* shift = bb.Multiply(bb.Convert(i, DType::kF32), bb.ConstantScalar(0.1f));
    auto* next = bb.Unary(hlo::Opcode::kTanh, bb.Add(wx, bb.Broadcast(shift, {4}, {})));
    m.AddComputation(bb.Build(bb.Tuple({bb.Add(i, bb.ConstantScalar<int64_t>(1)), next, w})));
  }
  auto* body = m.computations().back().get();
  Builder b("main");
  auto* x0 = b.Parameter(0, row, "x");
  auto* w0 = b.Parameter(1, Shape(DType::kF32, {4, 4}), "w");
  auto* loop = b.While(cond, body, b.Tuple({b.ConstantScalar<int64_t>(0), x0, w0}));
  auto* x = b.GetTupleElement(loop, 1);
  auto* total = b.Reduce(x, b.ConstantScalar(0.0f), {0}, add);
  m.AddEntryComputation(b.Build(b.Tuple({x, total})));

  fmt::print("{}\n", hlo::ToText(m));
  auto start = std::chrono::steady_clock::now();
  auto exe = compiler::Compile(m);
  auto compiled = std::chrono::steady_clock::now();
  const runtime::Device* device = runtime::Client::Default().device(0);
  std::vector<float> xv = {1, -1, 0.5f, 2};
  std::vector<float> wv(16);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) wv[r * 4 + c] = (r == c ? 0.5f : 0.1f * (c - r));
  auto out = exe->Run({runtime::Buffer::FromVector(xv, {4}, device),
                       runtime::Buffer::FromVector(wv, {4, 4}, device)});
  auto done = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  fmt::print("compiled in {} us (planned peak {} bytes), ran in {} us on {}\n",
             us(compiled - start), exe->stats().planned_peak_bytes, us(done - compiled),
             device->ToString());
  fmt::print("x after 10 steps = [{:.6f}]\n", fmt::join(out[0].ToVector<float>(), ", "));
  fmt::print("sum(x)           = {:.6f}\n", out[1].ToVector<float>()[0]);
  return 0;
}

}  // namespace strata::tools

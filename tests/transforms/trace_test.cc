// Chrome trace-event JSON (trace::Start / Stop, STRATA_TRACE): the file
// parses, every event has the fields Perfetto needs, each stage of a sync
// appears once per graph, kernels sit inside their execute event on the
// same track, a While loop has one event per iteration, and each thread is
// a track of its own.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "strata/core/error.h"
#include "strata/lazy/ops.h"
#include "strata/nn/tensor_files.h"
#include "strata/runtime/trace.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

using json = nlohmann::json;

// A scan of `steps` iterations over fresh shapes, so its graph compiles.
Tensor RunScan(int64_t steps, int64_t width) {
  std::vector<float> xs(steps * width, 0.5f), h0(width, 1.0f);
  Tensor x = Tensor::FromVector(xs, {steps, width});
  Tensor h = Tensor::FromVector(h0, {width});
  auto [carry, ys] = scan(
      [](const Tree& c, const Tree& xt) {
        Tensor next = tanh(c.leaf() * 0.5 + xt.leaf());
        return std::pair{Tree(next), Tree(next)};
      },
      Tree(h), Tree(x));
  Tensor out = carry.leaf();
  out.sync();
  return out;
}

std::vector<json> EventsNamed(const json& trace, const std::string& cat,
                              const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == cat && (name.empty() || e["name"] == name)) out.push_back(e);
  }
  return out;
}

bool Inside(const json& inner, const json& outer) {
  const double slack = 1e-3;  // microseconds are printed with three decimals
  return inner["tid"] == outer["tid"] &&
         inner["ts"].get<double>() + slack >= outer["ts"].get<double>() &&
         inner["ts"].get<double>() + inner["dur"].get<double>() <=
             outer["ts"].get<double>() + outer["dur"].get<double>() + slack;
}

void CheckWellFormed(const json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::map<int64_t, bool> named;  // tid -> has a thread_name
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid") && e.contains("tid"))
        << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") named[e["tid"].get<int64_t>()] = true;
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e["cat"].is_string()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    EXPECT_TRUE(e["args"].is_object()) << e.dump();
  }
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      EXPECT_TRUE(named[e["tid"].get<int64_t>()]) << "no track name for " << e;
    }
  }
}

TEST(Trace, EveryStageOfASyncKernelsAndLoopIterations) {
  trace::Start();
  RunScan(7, 13);  // a new graph: trace, lower, compile, execute
  RunScan(7, 13);  // the same graph: a cache hit, nothing compiled
  const json trace = json::parse(trace::StopToString());
  CheckWellFormed(trace);
  std::vector<json> syncs = EventsNamed(trace, "sync");
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0]["args"]["cache"], "miss");
  EXPECT_EQ(syncs[1]["args"]["cache"], "hit");
  EXPECT_EQ(syncs[0]["args"]["graph"], syncs[1]["args"]["graph"]);
  EXPECT_EQ(EventsNamed(trace, "trace").size(), 2u);
  ASSERT_EQ(EventsNamed(trace, "lower").size(), 1u);
  EXPECT_TRUE(Inside(EventsNamed(trace, "lower")[0], syncs[0]));
  std::vector<json> compiles = EventsNamed(trace, "compile", "compile");
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_TRUE(Inside(compiles[0], syncs[0]));
  EXPECT_EQ(EventsNamed(trace, "compile", "passes").size(), 1u);
  std::vector<json> executes = EventsNamed(trace, "execute", "execute");
  ASSERT_EQ(executes.size(), 2u);
  // Every kernel runs inside one of the two executions, on its track.
  std::vector<json> kernels = EventsNamed(trace, "kernel");
  ASSERT_FALSE(kernels.empty());
  for (const json& k : kernels) {
    EXPECT_TRUE(Inside(k, executes[0]) || Inside(k, executes[1])) << k.dump();
    EXPECT_TRUE(k["args"]["shape"].is_string()) << k.dump();
  }
  // One While per execution, seven iterations each, numbered 0..6, inside it.
  std::vector<json> loops, iterations;
  for (const json& e : EventsNamed(trace, "while"))
    (e["name"] == "iteration" ? iterations : loops).push_back(e);
  ASSERT_EQ(loops.size(), 2u);
  ASSERT_EQ(iterations.size(), 14u);
  std::map<int64_t, int> numbers;
  for (const json& it : iterations) {
    EXPECT_TRUE(Inside(it, loops[0]) || Inside(it, loops[1])) << it.dump();
    ++numbers[it["args"]["i"].get<int64_t>()];
  }
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(numbers[i], 2) << i;
  // Kernels of the body nest inside an iteration.
  int in_iterations = 0;
  for (const json& k : kernels) {
    for (const json& it : iterations) in_iterations += Inside(k, it) ? 1 : 0;
  }
  EXPECT_GE(in_iterations, 14);
}

TEST(Trace, EachThreadIsATrackOfItsOwn) {
  trace::Start();
  std::thread worker([] {
    trace::SetThreadName("worker");
    RunScan(3, 5);
  });
  worker.join();
  RunScan(4, 6);
  const json trace = json::parse(trace::StopToString());
  CheckWellFormed(trace);
  std::vector<json> executes = EventsNamed(trace, "execute", "execute");
  ASSERT_EQ(executes.size(), 2u);
  EXPECT_NE(executes[0]["tid"], executes[1]["tid"]);
  std::vector<std::string> names;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names.push_back(e["args"]["name"]);
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"main", "worker"}));
}

TEST(Trace, NothingIsRecordedWhenOff) {
  trace::Start();
  (void)trace::StopToString();
  RunScan(2, 3);  // recording is off
  trace::Start();
  const json trace = json::parse(trace::StopToString());
  EXPECT_TRUE(EventsNamed(trace, "kernel").empty());
  EXPECT_TRUE(EventsNamed(trace, "sync").empty());
}

TEST(Trace, AnUnwritablePathIsAnError) {
  trace::Start();
  EXPECT_THROW(trace::Stop("/nonexistent-directory/trace.json"), Error);
}

// STRATA_TRACE=file: the process records from its start and writes the file
// at exit. The strata tool runs a program with a While of five iterations
// that doubles its input each time.
constexpr char kLoopProgram[] = R"(HloModule loop

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  doubled = f32[4] add(x, x)
  ROOT t = (s32[], f32[4]) tuple(next, doubled)
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}
)";

// Runs the loop above through the strata tool with `env` set, in a
// directory of its own; returns the contents of `file` there afterwards
// (the tool's stderr is stderr.txt) and checks the loop's result.
std::string RunLoopWith(const std::string& env, const std::string& file) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      fmt::format("strata-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                  ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "loop.hlo") << kLoopProgram;
  save_safetensors((dir / "in.safetensors").string(),
                   {{"x", Tensor::FromVector<float>({1, 2, 3, 4}, {4})}});
  const std::string command = fmt::format(
      "{2} '{1}' run '{0}/loop.hlo' --inputs '{0}/in.safetensors' "
      "--output '{0}/out.safetensors' > /dev/null 2> '{0}/stderr.txt'",
      dir.string(), STRATA_BINARY, fmt::format(fmt::runtime(env), dir.string()));
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_EQ(load_safetensors((dir / "out.safetensors").string()).at("output").to_vector<float>(),
            (std::vector<float>{32, 64, 96, 128}));
  std::ifstream in(dir / file);
  EXPECT_TRUE(in) << file;
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove_all(dir);
  return text.str();
}

TEST(Trace, TheEnvironmentVariableWritesTheFileAtExit) {
  const json trace = json::parse(RunLoopWith("STRATA_TRACE='{}/trace.json'", "trace.json"));
  CheckWellFormed(trace);
  std::vector<json> iterations = EventsNamed(trace, "while", "iteration");
  ASSERT_EQ(iterations.size(), 5u);
  ASSERT_EQ(EventsNamed(trace, "while", "w").size(), 1u);
  // Each iteration runs the body's kernels (the counter's add and the
  // doubling, fused or not) on the loop's track.
  for (const json& it : iterations) {
    int kernels = 0;
    for (const json& k : EventsNamed(trace, "kernel")) kernels += Inside(k, it) ? 1 : 0;
    EXPECT_GE(kernels, 1) << it.dump();
  }
}

// STRATA_PROFILE=1: the default client profiles every kernel and the
// process prints the table at exit; the loop above runs its body's doubling
// five times, so some kernel ran at least five times.
TEST(Profile, TheEnvironmentVariablePrintsTheProfileAtExit) {
  const std::string report = RunLoopWith("STRATA_PROFILE=1", "stderr.txt");
  ASSERT_NE(report.find("strata kernel profile:"), std::string::npos) << report;
  // Each row: percent, milliseconds, count "x", opcode, shape.
  int64_t most = 0;
  std::istringstream lines(report);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    std::istringstream row(line);
    std::string percent, ms, unit, x;
    int64_t count = 0;
    if (row >> percent >> ms >> unit >> count >> x) most = std::max(most, count);
  }
  EXPECT_GE(most, 5) << report;
}

}  // namespace
}  // namespace strata

// `strata run` end to end: HLO text + safetensors in, safetensors out, and a
// clear error (never a crash) for each kind of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/io/safetensors.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

class RunCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_run_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteText(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name)) << text;
  }

  // Runs the tool; returns its exit code and fills `err` with stderr.
  int Run(const std::string& args, std::string* err) const {
    std::string command =
        std::string(STRATA_BINARY) + " run " + args + " --quiet 2> " + Path("stderr.txt");
    int status = std::system(command.c_str());
    std::ifstream in(Path("stderr.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WEXITSTATUS(status);
  }

  static io::TensorData F32(std::string name, std::vector<int64_t> shape,
                            std::vector<float> values) {
    io::TensorData t{std::move(name), DType::kF32, std::move(shape), {}};
    t.bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }

  static std::vector<float> ReadF32(const io::SafetensorsFile& f, const std::string& name) {
    const io::TensorView& v = f.Get(name);
    std::vector<float> out(v.data.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), v.data.data(), v.data.size());
    return out;
  }

  fs::path dir_;
};

constexpr char kAffine[] = R"(HloModule affine

ENTRY main {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[3,2]{1,0} parameter(1)
  %b = f32[2] parameter(2)
  %dot = f32[2,2]{1,0} dot(f32[2,3]{1,0} %x, f32[3,2]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[2,2] broadcast(%b), dimensions={1}
  %y = f32[2,2] add(%dot, %bb)
  %zero = f32[] constant(0)
  %relu = f32[2,2] maximum(%y, f32[2,2] broadcast(%zero), dimensions={})
  ROOT %t = (f32[2,2], f32[2,2]) tuple(%y, %relu)
}
)";

TEST_F(RunCommand, RunsAProgramOnNamedInputs) {
  // The program above without the nested broadcast (not valid HLO text).
  std::string program = kAffine;
  program.replace(program.find("  %relu"), std::string::npos,
                  "  %zeros = f32[2,2] broadcast(%zero), dimensions={}\n"
                  "  %relu = f32[2,2] maximum(%y, %zeros)\n"
                  "  ROOT %t = (f32[2,2], f32[2,2]) tuple(%y, %relu)\n}\n");
  WriteText("affine.hlo", program);
  io::WriteSafetensors(Path("in.safetensors"),
                       {F32("x", {2, 3}, {1, 2, 3, -4, -5, -6}),
                        F32("w", {3, 2}, {1, 0, 0, 1, 1, 1}), F32("b", {2}, {0.5f, -0.5f})});
  std::string err;
  ASSERT_EQ(Run(Path("affine.hlo") + " --inputs " + Path("in.safetensors") + " --output " +
                    Path("out.safetensors"),
                &err),
            0)
      << err;
  auto out = io::SafetensorsFile::Open(Path("out.safetensors"));
  // y = x @ w + b worked by hand: row 0 = [1+3+.5, 2+3-.5], row 1 = [-4-6+.5, -5-6-.5].
  EXPECT_EQ(ReadF32(out, "output.0"), (std::vector<float>{4.5f, 4.5f, -9.5f, -11.5f}));
  EXPECT_EQ(ReadF32(out, "output.1"), (std::vector<float>{4.5f, 4.5f, 0.0f, 0.0f}));
}

TEST_F(RunCommand, SingleResultIsNamedOutput) {
  WriteText(
      "neg.hlo",
      "HloModule m\nENTRY e {\n  p0 = f32[3] parameter(0)\n  ROOT n = f32[3] negate(p0)\n}\n");
  io::WriteSafetensors(Path("in.safetensors"), {F32("p0", {3}, {1, -2, 0.25f})});
  std::string err;
  ASSERT_EQ(Run(Path("neg.hlo") + " --inputs " + Path("in.safetensors") + " --output " +
                    Path("o.safetensors"),
                &err),
            0)
      << err;
  auto out = io::SafetensorsFile::Open(Path("o.safetensors"));
  EXPECT_EQ(ReadF32(out, "output"), (std::vector<float>{-1, 2, -0.25f}));
}

struct BadCase {
  std::string name, program;
  std::vector<io::TensorData> inputs;
  std::string corrupt_inputs;  // raw bytes instead of `inputs` when non-empty
  std::string expected;
};

// Reshape -> reverse -> reshape of a tensor with no elements (the HLO of a
// flipped empty sequence) runs to an empty result; it killed the compile
// with SIGFPE.
TEST_F(RunCommand, AZeroSizeViewRunsToAnEmptyResult) {
  WriteText("flip.hlo",
            "HloModule flip\n"
            "ENTRY main {\n"
            "  x = f32[0,6] parameter(0)\n"
            "  r = f32[3,0,2] reshape(x)\n"
            "  f = f32[3,0,2] reverse(r), dimensions={0,1,2}\n"
            "  b = f32[0,6] reshape(f)\n"
            "  ROOT y = f32[0,6] exponential(b)\n"
            "}\n");
  io::WriteSafetensors(Path("in.safetensors"), {F32("x", {0, 6}, {})});
  std::string err;
  ASSERT_EQ(Run(Path("flip.hlo") + " --inputs " + Path("in.safetensors") + " --output " +
                    Path("out.safetensors"),
                &err),
            0)
      << err;
  io::SafetensorsFile out = io::SafetensorsFile::Open(Path("out.safetensors"));
  EXPECT_EQ(out.Get("output").shape, (std::vector<int64_t>{0, 6}));
}

TEST_F(RunCommand, BadInputsGiveClearErrors) {
  const std::string neg =
      "HloModule m\nENTRY e {\n  p0 = f32[3] parameter(0)\n  ROOT n = f32[3] negate(p0)\n}\n";
  std::vector<BadCase> cases = {
      {"missing tensor", neg, {F32("x", {3}, {1, 2, 3})}, "", "no tensor named 'p0'"},
      {"wrong shape", neg, {F32("p0", {2}, {1, 2})}, "", "expects f32[3]"},
      {"malformed program",
       "HloModule m\nENTRY e {\n  p0 = f32[3] parameter(0)\n  ROOT n = f32[3] negate(p0\n}\n",
       {F32("p0", {3}, {1, 2, 3})},
       "",
       "line "},
      {"corrupt inputs",
       neg,
       {},
       std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"p0\":", 14),
       "[safetensors]"},
      {"unknown opcode",
       "HloModule m\nENTRY e {\n  p0 = f32[3] parameter(0)\n  ROOT n = f32[3] frobnicate(p0)\n}\n",
       {F32("p0", {3}, {1, 2, 3})},
       "",
       "frobnicate"},
  };
  for (const BadCase& c : cases) {
    WriteText("p.hlo", c.program);
    if (c.corrupt_inputs.empty()) {
      io::WriteSafetensors(Path("in.safetensors"), c.inputs);
    } else {
      std::ofstream(Path("in.safetensors"), std::ios::binary) << c.corrupt_inputs;
    }
    std::string err;
    int code = Run(Path("p.hlo") + " --inputs " + Path("in.safetensors") + " --output " +
                       Path("o.safetensors"),
                   &err);
    EXPECT_EQ(code, 1) << c.name << ": " << err;
    EXPECT_NE(err.find("strata: error:"), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expected), std::string::npos) << c.name << ": " << err;
  }
}

TEST_F(RunCommand, MissingProgramFile) {
  std::string err;
  EXPECT_EQ(Run(Path("nope.hlo") + " --output " + Path("o.safetensors"), &err), 1);
  EXPECT_NE(err.find("cannot open program file"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Runs `strata devices` under an environment assignment; returns stdout and
// the exit code.
std::pair<std::string, int> Devices(const std::string& env) {
  std::string out_path =
      (fs::temp_directory_path() / ("strata_devices_" + std::to_string(::getpid()))).string();
  std::string command = env + " " + STRATA_BINARY + " devices > " + out_path + " 2>&1";
  int status = std::system(command.c_str());
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(out_path);
  return {ss.str(), WEXITSTATUS(status)};
}

// The device lines, without the kernels line that follows them.
std::pair<std::string, int> DeviceLines(const std::string& env) {
  auto [out, code] = Devices(env);
  size_t kernels = out.find("kernels: ");
  return {kernels == std::string::npos ? out : out.substr(0, kernels), code};
}

TEST(Devices, VirtualCpuDevicesFromTheEnvironment) {
  EXPECT_EQ(DeviceLines("env -u STRATA_CPU_DEVICES"), std::make_pair(std::string("cpu:0\n"), 0));
  EXPECT_EQ(DeviceLines("STRATA_CPU_DEVICES=3"),
            std::make_pair(std::string("cpu:0\ncpu:1\ncpu:2\n"), 0));
  auto [bad, code] = Devices("STRATA_CPU_DEVICES=two");
  EXPECT_EQ(code, 1);
  EXPECT_NE(bad.find("STRATA_CPU_DEVICES must be an integer in [1, 1024], got 'two'"),
            std::string::npos)
      << bad;
}

// STRATA_ISA caps the kernels' instruction set; `strata devices` says which
// one runs. Every x86-64 CPU runs the portable kernels.
TEST(Devices, TheKernelsInstructionSetFromTheEnvironment) {
  auto [native, code] = Devices("env -u STRATA_ISA");
  EXPECT_EQ(code, 0) << native;
  EXPECT_NE(native.find("kernels: "), std::string::npos) << native;
  auto [portable, portable_code] = Devices("STRATA_ISA=portable");
  EXPECT_EQ(portable_code, 0) << portable;
  EXPECT_NE(portable.find("kernels: portable (this CPU runs up to "), std::string::npos)
      << portable;
  auto [bad, bad_code] = Devices("STRATA_ISA=avx3");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad.find("STRATA_ISA must be portable, avx2, avx512 or avx512bf16, got 'avx3'"),
            std::string::npos)
      << bad;
}

}  // namespace
}  // namespace strata

// Config: the environment read in one place, into typed fields, with
// errors that name the variable; per-process settings fixed once read.
#include "strata/core/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "strata/core/error.h"

namespace strata {
namespace {

// Sets a variable for one scope (FromEnvironment's own input).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(Config, TheDefaultsAreTheDocumentedOnes) {
  const Config c;
  EXPECT_EQ(c.cpu_devices, 1);
  EXPECT_TRUE(c.fusion);
  EXPECT_TRUE(c.index_checks);
  EXPECT_EQ(c.device_threads, 0);
  EXPECT_EQ(c.collective_timeout.count(), 300000);
  EXPECT_TRUE(c.dump_dir.empty() && c.trace_path.empty() && c.isa.empty());
}

TEST(Config, EachVariableSetsItsField) {
  ScopedEnv devices("STRATA_CPU_DEVICES", "4");
  ScopedEnv fusion("STRATA_NO_FUSION", "1");
  ScopedEnv checks("STRATA_INDEX_CHECKS", "0");
  ScopedEnv threads("STRATA_DEVICE_THREADS", "3");
  ScopedEnv timeout("STRATA_COLLECTIVE_TIMEOUT_MS", "1500");
  ScopedEnv dump("STRATA_DUMP_DIR", "/tmp/strata-dump");
  ScopedEnv isa("STRATA_ISA", "avx2");
  ScopedEnv rank("OMPI_COMM_WORLD_RANK", "3");
  const Config c = Config::FromEnvironment();
  EXPECT_EQ(c.cpu_devices, 4);
  EXPECT_FALSE(c.fusion);
  EXPECT_FALSE(c.index_checks);
  EXPECT_EQ(c.device_threads, 3);
  EXPECT_EQ(c.collective_timeout.count(), 1500);
  EXPECT_EQ(c.dump_dir, "/tmp/strata-dump");
  EXPECT_EQ(c.isa, "avx2");
  EXPECT_EQ(c.launcher_rank, "3");
}

TEST(Config, AMalformedValueNamesTheVariableWhatItMustBeAndWhatItIs) {
  for (const char* bad : {"two", "0", "1025", "3x", ""}) {
    ScopedEnv devices("STRATA_CPU_DEVICES", bad);
    try {
      Config::FromEnvironment();
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "[config] STRATA_CPU_DEVICES must be an integer in [1, 1024], got '" +
                    std::string(bad) + "'");
    }
  }
  ScopedEnv timeout("STRATA_COLLECTIVE_TIMEOUT_MS", "-5");
  EXPECT_THROW(Config::FromEnvironment(), Error);
}

// A switch is on or off, never a guess: STRATA_NO_FUSION=0 once turned fusion
// off (any value did), and STRATA_INDEX_CHECKS=maybe turned checks on.
TEST(Config, SwitchesReadOnAndOffAndRejectTheRest) {
  {
    ScopedEnv fusion("STRATA_NO_FUSION", "0");
    EXPECT_TRUE(Config::FromEnvironment().fusion);
  }
  {
    ScopedEnv fusion("STRATA_FUSION", "off");
    EXPECT_FALSE(Config::FromEnvironment().fusion);
  }
  {
    ScopedEnv fusion("STRATA_FUSION", "1");
    ScopedEnv no_fusion("STRATA_NO_FUSION", "1");
    EXPECT_THROW(Config::FromEnvironment(), Error);
  }
  for (const char* name : {"STRATA_FUSION", "STRATA_NO_FUSION", "STRATA_INDEX_CHECKS",
                           "STRATA_PROFILE", "STRATA_SPMD_TRACE"}) {
    ScopedEnv bad(name, "maybe");
    try {
      Config::FromEnvironment();
      FAIL() << name << "=maybe accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "[config] " + std::string(name) +
                                           " must be 1 or 0 (true/false, yes/no, on/off), got "
                                           "'maybe'");
    }
  }
}

TEST(Config, PerProcessSettingsAreFixedOnceReadTheOthersNot) {
  const Config before = GetConfig();
  MarkProcessSettingsRead();  // as the default client does
  Config other = before;
  other.cpu_devices = before.cpu_devices + 1;
  try {
    SetConfig(other);
    FAIL() << "changed cpu_devices after it was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_devices is read once per process"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(GetConfig(), before);
  other = before;
  other.index_checks = !before.index_checks;
  other.collective_timeout = std::chrono::milliseconds(1234);
  SetConfig(other);
  EXPECT_EQ(GetConfig().collective_timeout.count(), 1234);
  other.device_threads = -1;
  EXPECT_THROW(SetConfig(other), Error);
  SetConfig(before);
  EXPECT_EQ(GetConfig(), before);
}

}  // namespace
}  // namespace strata

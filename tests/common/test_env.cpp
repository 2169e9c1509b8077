#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/token.h"

namespace lockstep {
namespace {

TEST(Environment, ParsesIntegersStrictly) {
  Environment env({{"A", "42"}, {"B", "4x"}, {"C", ""}, {"D", "-1"}, {"E", "99999999999999999999"}});
  EXPECT_EQ(env.getInt("A"), 42);
  EXPECT_FALSE(env.getInt("MISSING").has_value());
  EXPECT_THROW(env.getInt("B"), ConfigError);
  EXPECT_THROW(env.getInt("C"), ConfigError);
  EXPECT_THROW(env.getInt("D", 0, 10), ConfigError);
  EXPECT_THROW(env.getInt("E"), ConfigError);
  try {
    env.getInt("B");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("environment variable B='4x' is not an integer"), std::string::npos)
        << e.what();
  }
}

TEST(Environment, ParsesSeconds) {
  Environment env({{"T", "1.5"}, {"Z", "0"}, {"N", "-2"}, {"X", "soon"}});
  EXPECT_EQ(env.getSeconds("T")->count(), 1500);
  EXPECT_EQ(env.getSeconds("Z")->count(), 0);
  EXPECT_THROW(env.getSeconds("N"), ConfigError);
  EXPECT_THROW(env.getSeconds("X"), ConfigError);
}

TEST(Environment, FromProcessSeesRealVariables) {
  ::setenv("LOCKSTEP_TEST_VARIABLE", "hello", 1);
  EXPECT_EQ(Environment::fromProcess().get("LOCKSTEP_TEST_VARIABLE"), "hello");
}

TEST(Errors, CheckMacrosPrintBothValues) {
  try {
    int world = 2;
    int rank = 5;
    LOCKSTEP_CHECK_LT(rank, world, "rank out of range");
    FAIL();
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank = 5, world = 2"), std::string::npos) << what;
    EXPECT_NE(what.find("rank out of range"), std::string::npos) << what;
    EXPECT_NE(what.find("test_env.cpp:"), std::string::npos) << what;
  }
  EXPECT_THROW(LOCKSTEP_ASSERT(1 == 2, "bug"), InternalError);
}

TEST(Logging, ParsesLevels) {
  EXPECT_EQ(log::parseLevel("DEBUG", "x"), log::Level::kDebug);
  EXPECT_EQ(log::parseLevel("warn", "x"), log::Level::kWarn);
  EXPECT_THROW(log::parseLevel("loud", "LOCKSTEP_LOG_LEVEL"), ConfigError);
}

enum class Fruit { kApple, kPear };
constexpr EnumName<Fruit> kFruitNames[] = {{Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPear, "poire"}};

TEST(EnumNames, OneTableGivesNamesParsingAliasesAndAnErrorListingTheNames) {
  EXPECT_STREQ(enumName(kFruitNames, Fruit::kPear), "pear");  // the first entry is the name
  EXPECT_EQ(parseEnum(kFruitNames, "Poire", "fruit"), Fruit::kPear);
  EXPECT_EQ(parseEnum(kFruitNames, "APPLE", "fruit"), Fruit::kApple);
  try {
    parseEnum(kFruitNames, "plum", "basket.fruit");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) { EXPECT_STREQ(e.what(), "basket.fruit 'plum' is unknown; expected apple or pear"); }
  EXPECT_EQ(log::parseLevel("warning", "LOCKSTEP_LOG_LEVEL"), log::Level::kWarn);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

std::string tokenFile(const std::string& text, mode_t mode) {
  char path[] = "/tmp/lockstep-token-XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << text;
  ::chmod(path, mode);
  return path;
}

TEST(Token, ShortOrWorldReadableTokenFilesWarnAndStillWork) {
  std::string weak = tokenFile("short\n", 0644);
  testing::internal::CaptureStderr();
  EXPECT_EQ(readTokenFile(weak, "--token-file"), "short");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("the job token is 5 characters; use at least 32"), std::string::npos) << err;
  EXPECT_NE(err.find("is readable by other users (mode 0644)"), std::string::npos) << err;
  EXPECT_NE(err.find(weak), std::string::npos) << "names the file: " << err;

  std::string strong = tokenFile(randomToken() + "\n", 0600);
  testing::internal::CaptureStderr();
  EXPECT_EQ(readTokenFile(strong, "--token-file").size(), 64u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "a 64-character token in a private file: no warning";

  testing::internal::CaptureStderr();
  EXPECT_EQ(tokenFromEnvironment(Environment(std::map<std::string, std::string>{{"LOCKSTEP_JOB_TOKEN", "abc"}})),
            std::optional<std::string>("abc"));
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("LOCKSTEP_JOB_TOKEN: the job token is 3 characters"), std::string::npos) << err;
  std::remove(weak.c_str());
  std::remove(strong.c_str());
}

}  // namespace
}  // namespace lockstep

// `lockstep bench memory` as a user runs it: real `lockstep run` children
// training a tiny pet-name model with ddp, zero1, zero2 and zero3 at 1 and 2 workers; the
// JSON on its last line checked against the sizes the model implies; and
// its usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

test::ProcessResult lockstep(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"sh", "-c", "cd \"$0\" && exec \"$@\"", dir, test::lockstepBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(120);
  return test::runProcess(argv, o);
}

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << test::tinyNamesConfig("");
  return dir;
}

TEST(BenchMemory, Zero1RanksHoldLessThanDdpAndTheTheoryIsGiven) {
  std::string dir = makeRunDir();
  auto r =
      lockstep(dir, {"bench", "memory", "tiny.yaml", "--np", "1,2", "--steps", "2", "--json", "optimizer.type=adam"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(test::lastLine(r.out))) << r.out;
  EXPECT_EQ(doc.at("benchmark"), "memory");
  const auto& runs = doc.at("runs");
  ASSERT_EQ(runs.size(), 8u) << "np 1 and 2, ddp, zero1, zero2 and zero3 (the default strategies)";
  int64_t params = -1;
  for (const auto& run : runs) {
    SCOPED_TRACE(run.dump());
    const int np = run.at("np").get<int>();
    const auto& ranks = run.at("ranks");
    ASSERT_EQ(static_cast<int>(ranks.size()), np) << "one entry per rank";
    for (const auto& rank : ranks) {
      if (params < 0) params = rank.at("parameter_bytes").get<int64_t>();
      const bool zero2 = run.at("strategy") == "zero2", zero3 = run.at("strategy") == "zero3";
      if (zero3 && np == 2) {
        // Its half of the one unit (the model), padded to an even element count.
        EXPECT_GE(rank.at("parameter_bytes").get<int64_t>(), params / 2);
        EXPECT_LE(rank.at("parameter_bytes").get<int64_t>(), params / 2 + 4);
      } else {
        EXPECT_EQ(rank.at("parameter_bytes").get<int64_t>(), params);
      }
      if ((zero2 || zero3) && np == 2) {
        // Half of each bucket, padded to an even element count: at most one float more per bucket.
        EXPECT_GE(rank.at("gradient_bytes").get<int64_t>(), params / 2 - 4 * 8);
        EXPECT_LE(rank.at("gradient_bytes").get<int64_t>(), params / 2 + 4 * 8);
      } else {
        EXPECT_EQ(rank.at("gradient_bytes").get<int64_t>(), params);
      }
      EXPECT_EQ(rank.at("comm_buffer_bytes").get<int64_t>(), 0)
          << "ddp's and zero1's gradients are their buckets; zero2 and zero3 free theirs once reduce-scattered";
      EXPECT_GT(rank.at("step_peak_bytes").get<int64_t>(), 0);
      EXPECT_GT(rank.at("peak_rss_bytes").get<int64_t>(), 0);
      const double vsDdp = rank.at("model_state_vs_ddp").get<double>();
      if (run.at("strategy") == "ddp" || np == 1) {
        EXPECT_EQ(rank.at("optimizer_bytes").get<int64_t>(), 2 * params) << "Adam: two moments per element";
        EXPECT_DOUBLE_EQ(vsDdp, 1.0);
      } else {
        EXPECT_LT(rank.at("optimizer_bytes").get<int64_t>(), 2 * params);
        EXPECT_LT(vsDdp, 1.0);
      }
    }
  }
  // At 2 workers, with O = 2P = 2G: zero1 (P + G + O/2) / (P + G + O) = 0.75, zero2 (P + (G + O)/2) / (P + G + O) =
  // 0.625.
  EXPECT_EQ(runs[5].at("strategy"), "zero1");
  EXPECT_NEAR(runs[5].at("theory_vs_ddp").get<double>(), 0.75, 1e-9);
  EXPECT_EQ(runs[6].at("strategy"), "zero2");
  EXPECT_NEAR(runs[6].at("theory_vs_ddp").get<double>(), 0.625, 1e-9);
  EXPECT_LT(runs[6].at("ranks")[0].at("model_state_vs_ddp").get<double>(),
            runs[5].at("ranks")[0].at("model_state_vs_ddp").get<double>());
  EXPECT_EQ(runs[7].at("strategy"), "zero3");
  EXPECT_NEAR(runs[7].at("theory_vs_ddp").get<double>(), 0.5, 1e-9);
  for (const auto& rank : runs[7].at("ranks")) EXPECT_NEAR(rank.at("model_state_vs_ddp").get<double>(), 0.5, 0.001);
}

TEST(BenchMemory, BadArgumentsAreUsageErrors) {
  std::string dir = makeRunDir();
  auto r = lockstep(dir, {"bench", "memory", "tiny.yaml", "--np", "2", "--strategies", "ddp,zero9"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("--strategies 'zero9' is unknown; expected ddp, zero1, zero2 or zero3"), std::string::npos)
      << r.err;
  r = lockstep(dir, {"bench", "memory", "tiny.yaml", "--np", "2", "--strategies", "async_ps"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("--strategies 'async_ps': bench memory measures the strategies of the sync schedule"),
            std::string::npos)
      << r.err;
  r = lockstep(dir, {"bench", "memory", "tiny.yaml"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("missing --np"), std::string::npos) << r.err;
  r = lockstep(dir, {"bench", "memory", "tiny.yaml", "--np", "2", "precision=fp8"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("precision 'fp8' is unknown; expected fp32, bf16 or fp16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace lockstep

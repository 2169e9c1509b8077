// `lockstep bench scaling` as a user runs it: real `lockstep run` children
// training a tiny pet-name model with 1 and 2 workers, the JSON it prints
// checked for the rows, the phase breakdown and the communication figures;
// and `lockstep train --result-json` / `--np` mistakes as usage errors; `lockstep bench
// allreduce` under `lockstep run`: its value check and where its buffers live.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

using test::ProcessOptions;
using test::ProcessResult;

const std::string kTinyConfig = test::tinyNamesConfig("  log_every: 4\n");

ProcessResult lockstep(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"sh", "-c", "cd \"$0\" && exec \"$@\"", dir, test::lockstepBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o;
  o.timeout = std::chrono::seconds(100);
  return test::runProcess(argv, o);
}

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << kTinyConfig;
  return dir;
}

TEST(BenchScaling, OneAndTwoWorkersGiveRowsWithPhasesAndCommunication) {
  std::string dir = makeRunDir();
  auto r = lockstep(dir, {"bench", "scaling", "tiny.yaml", "--np", "1,2", "--steps", "8", "--json"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("run -np 2 --threads"), std::string::npos) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(test::lastLine(r.out))) << r.out;
  EXPECT_EQ(doc.at("benchmark"), "scaling");
  EXPECT_EQ(doc.at("steps"), 8);
  const auto& rows = doc.at("rows");
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = rows[i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row.at("np").get<int>(), static_cast<int>(i) + 1);
    EXPECT_GE(row.at("threads_per_worker").get<int>(), 1);
    EXPECT_GT(row.at("samples_per_second").get<double>(), 0);
    EXPECT_EQ(row.at("global_batch").get<int>(), 16 * (static_cast<int>(i) + 1));
    EXPECT_EQ(row.at("timed_steps").get<int>(), 7) << "8 steps, the first not timed";
    double step = row.at("step_ms").get<double>();
    EXPECT_GT(step, 0);
    double sum = 0;
    for (const char* phase : {"data_wait", "forward", "backward", "comm_wait", "optimizer"}) {
      ASSERT_TRUE(row.at("phases_ms").contains(phase)) << phase;
      double ms = row.at("phases_ms").at(phase).get<double>();
      EXPECT_GE(ms, 0) << phase;
      sum += ms;
    }
    EXPECT_NEAR(sum, step, 0.2 * step);
    EXPECT_GT(row.at("phases_ms").at("forward").get<double>(), 0);
    EXPECT_GT(row.at("phases_ms").at("backward").get<double>(), 0);
  }
  EXPECT_DOUBLE_EQ(rows[0].at("speedup").get<double>(), 1.0);
  EXPECT_TRUE(rows[0].at("comm_hidden_fraction").is_null()) << "one worker communicates nothing";
  EXPECT_EQ(rows[0].at("buckets").get<int>(), 0);
  const auto& two = rows[1];
  EXPECT_NEAR(two.at("efficiency").get<double>(), two.at("speedup").get<double>() / 2, 1e-9);
  EXPECT_GT(two.at("comm_total_ms").get<double>(), 0);
  ASSERT_TRUE(two.at("comm_hidden_fraction").is_number()) << two.dump();
  EXPECT_GE(two.at("comm_hidden_fraction").get<double>(), 0);
  EXPECT_LE(two.at("comm_hidden_fraction").get<double>(), 1);
  EXPECT_GE(two.at("comm_exposed_max_ms").get<double>(), two.at("comm_exposed_ms").get<double>());
  EXPECT_GE(two.at("buckets").get<int>(), 1);
  EXPECT_GT(two.at("bucket_bytes").get<int64_t>(), 0);
  EXPECT_FALSE(doc.at("notes").empty()) << "a two-row run always says how it scaled";
}

TEST(BenchScaling, BadWorldSizesAreUsageErrorsNamingNp) {
  std::string dir = makeRunDir();
  for (const char* np : {"0", "a", "1,,2"}) {
    auto r = lockstep(dir, {"bench", "scaling", "tiny.yaml", "--np", np});
    EXPECT_EQ(r.exitCode, 2) << np << ": " << r.err;
    EXPECT_NE(r.err.find("--np '" + std::string(np) + "'"), std::string::npos) << r.err;
  }
  auto missing = lockstep(dir, {"bench", "scaling", "tiny.yaml"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("missing --np"), std::string::npos) << missing.err;
}

TEST(BenchScaling, ResultJsonInAMissingDirectoryIsAUsageError) {
  std::string dir = makeRunDir();
  auto r = lockstep(dir, {"train", "tiny.yaml", "--result-json", "no/such/dir/result.json"});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("--result-json 'no/such/dir/result.json'"), std::string::npos) << r.err;
}

TEST(BenchAllreduce, TwoWorkersCheckTheValuesWhereTheBuffersLive) {
  std::string dir = makeRunDir();
  auto r = lockstep(dir, {"run", "-np", "2", "--backend", "gloo", "--no-prefix", "--", test::lockstepBin(), "bench",
                          "allreduce", "--bytes", "4K,64K", "--iters", "3", "--op", "avg", "--json"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(test::lastLine(r.out))) << r.out;
  EXPECT_EQ(doc.at("backend"), "gloo");
  EXPECT_EQ(doc.at("world_size"), 2);
  EXPECT_EQ(doc.at("device"), "cpu") << "auto: the CPU on a backend that moves host memory";
  ASSERT_EQ(doc.at("results").size(), 2u) << r.out;
  for (const auto& row : doc.at("results")) {
    EXPECT_EQ(row.at("wrong").get<int64_t>(), 0) << row.dump();
    EXPECT_GT(row.at("time_us").get<double>(), 0) << row.dump();
  }

  // A GPU asked for where none is visible: an error naming the flag, nothing measured.
  ProcessOptions hidden;
  hidden.setEnv = {{"CUDA_VISIBLE_DEVICES", ""}};
  auto none = test::runProcess({test::lockstepBin(), "bench", "allreduce", "--device", "cuda"}, hidden);
  EXPECT_EQ(none.exitCode, 2) << none.err;
  EXPECT_NE(none.err.find("--device: cuda, but no CUDA device is visible"), std::string::npos) << none.err;
  EXPECT_EQ(none.out.find("size(B)"), std::string::npos) << none.out;
}

}  // namespace
}  // namespace lockstep

// `lockstep bench predict` as a user runs it: two real profile runs of a tiny
// pet-name model (1 and 2 workers), the prediction as JSON and as an HTML
// page, the profiles kept and reused, and bad flags as usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

using test::ProcessOptions;
using test::ProcessResult;

ProcessResult lockstep(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"sh", "-c", "cd \"$0\" && exec \"$@\"", dir, test::lockstepBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o;
  o.timeout = std::chrono::seconds(150);
  return test::runProcess(argv, o);
}

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  // Small buckets, so the two-worker profile has several to fit the backend's cost to.
  std::ofstream(dir + "/tiny.yaml") << test::tinyNamesConfig(
      "  log_every: 4\n", "ddp:\n  bucket_cap_mb: 0.01\n  first_bucket_cap_mb: 0.01\n");
  return dir;
}

const nlohmann::json& row(const nlohmann::json& doc, const std::string& link, int workers) {
  for (const auto& r : doc.at("rows")) {
    if (r.at("link") == link && r.at("workers") == workers) return r;
  }
  throw std::runtime_error("no row " + link + " x " + std::to_string(workers) + " in " + doc.dump());
}

TEST(BenchPredict, ProfilesOneAndTwoWorkersAndPredictsEveryLinkAndSize) {
  std::string dir = makeRunDir();
  auto r = lockstep(dir, {"bench", "predict", "tiny.yaml", "--link", "1000gbit@0us,100mbit", "--workers", "1,2,8,64",
                          "--steps", "10", "--profile-dir", "profiles", "--json", "--html", "predict.html"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("run -np 2 --threads 1 --backend gloo"), std::string::npos) << r.err;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(test::lastLine(r.out))) << r.out;
  EXPECT_EQ(doc.at("benchmark"), "predict");
  EXPECT_EQ(doc.at("algorithm"), "ring");
  EXPECT_EQ(doc.at("rows").size(), 8u);
  EXPECT_GE(doc.at("buckets").get<int>(), 2) << "bucket_cap_mb 0.01 splits the gradients";
  EXPECT_GT(doc.at("software").at("per_byte_seconds").get<double>(), 0);
  EXPECT_FALSE(doc.at("assumptions").empty());

  // The pair profile holds every bucket, released after backward's start.
  std::ifstream pairFile(dir + "/profiles/pair.json");
  nlohmann::json pair = nlohmann::json::parse(pairFile);
  const auto& buckets = pair.at("comm").at("bucket_profile");
  ASSERT_EQ(buckets.size(), doc.at("buckets").get<size_t>());
  int64_t bytes = 0;
  for (const auto& b : buckets) {
    EXPECT_GE(b.at("ready_seconds").get<double>(), 0) << b.dump();
    EXPECT_GT(b.at("comm_seconds").get<double>(), 0) << b.dump();
    bytes += b.at("bytes").get<int64_t>();
  }
  EXPECT_EQ(bytes, pair.at("comm").at("bucket_bytes").get<int64_t>());

  const double single = doc.at("single_samples_per_second").get<double>();
  EXPECT_DOUBLE_EQ(row(doc, "100mbit", 1).at("samples_per_second").get<double>(), single);
  // On a free wire two workers replay their own profile: near what the pair measured.
  const double measuredPair = pair.at("samples_per_second").get<double>();
  const double predictedPair = row(doc, "1000gbit@0us", 2).at("samples_per_second").get<double>();
  EXPECT_GT(predictedPair, 0.5 * measuredPair) << r.out;
  EXPECT_LT(predictedPair, 2.0 * measuredPair) << r.out;
  // A slower link or more workers never predict more throughput per worker.
  for (int n : {2, 8, 64}) {
    const auto& fast = row(doc, "1000gbit@0us", n);
    const auto& slow = row(doc, "100mbit", n);
    EXPECT_LE(slow.at("efficiency").get<double>(), fast.at("efficiency").get<double>()) << n;
    EXPECT_GT(slow.at("exposed_seconds").get<double>(), fast.at("exposed_seconds").get<double>()) << n;
  }
  EXPECT_LE(row(doc, "100mbit", 64).at("efficiency").get<double>(),
            row(doc, "100mbit", 8).at("efficiency").get<double>());

  std::ifstream html(dir + "/predict.html");
  std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("100mbit"), std::string::npos);

  // A second prediction reuses the kept profiles: no training run.
  r = lockstep(dir,
               {"bench", "predict", "tiny.yaml", "--link", "10gbit", "--workers", "512", "--profile-dir", "profiles"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("reusing the profile"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("profiling"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("10gbit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("assumptions:"), std::string::npos) << r.out;
}

TEST(BenchPredict, BadFlagsAreUsageErrors) {
  std::string dir = makeRunDir();
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{{{"tiny.yaml", "--link", "10gbps"}, "--link '10gbps'"},
                                         {{"tiny.yaml", "--workers", "0,2"}, "--workers '0,2'"},
                                         {{"tiny.yaml", "--latency", "fast"}, "--latency 'fast'"},
                                         {{"tiny.yaml", "--backend", "nccl"}, "--backend"},
                                         {{"--link", "1gbit"}, "missing CONFIG.yaml"},
                                         {{"tiny.yaml", "trainer.bogus=1"}, "trainer.bogus"}}) {
    std::vector<std::string> args{"bench", "predict"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = lockstep(dir, args);
    EXPECT_EQ(r.exitCode, 2) << c.expected << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("profiling"), std::string::npos) << "no run before the flags are checked";
  }
}

}  // namespace
}  // namespace lockstep

// schedule.type async_ps as a user runs it: `lockstep run -np 4 -- lockstep train cfg
// schedule.type=async_ps` (3 workers and a server on the real Fashion-MNIST, one worker slowed by the
// test knob) learns within the staleness bound; a server killed mid-run ends the run with an error
// naming it, or with --max-restarts is restarted with the others and the run resumes from the
// servers' last checkpoint, which a DDP run loads too.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <numeric>
#include <regex>

#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

/// `lockstep run -np 4 -- lockstep train fashion_convnet.yaml schedule.type=async_ps ... ARGS` (run in the test's dir).
std::string command(const std::string& args, const std::string& runArgs = "") {
  const std::string bin = test::lockstepBin();
  const std::string config = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/fashion_convnet.yaml";
  return quote(bin) + " run -np 4 --comm-timeout 60 " + runArgs + " -- " + quote(bin) + " train " + quote(config) +
         " schedule.type=async_ps checkpoint.dir=off monitor.dir=off optimizer.lr=0.003 " + args;
}

/// Runs a shell script in `dir`: `run` in the background into `log`, wait until `file` exists, SIGKILL
/// rank 3 by the pid of the launcher's first line, wait for the run and print its log (exit 99: no file
/// or pid).
test::ProcessResult runKillingServerWhen(const std::string& dir, const std::string& run, const std::string& file) {
  const std::string script = "cd " + quote(dir) + "\n" + run +
                             " > log 2>&1 &\nrun=$!\n"
                             "for i in $(seq 1 600); do [ -e " +
                             file +
                             " ] && break; sleep 0.2; done\n"
                             "pid=$(sed -n 's/.*rank 3 pid \\([0-9]*\\).*/\\1/p' log | head -1)\n"
                             "if [ -z \"$pid\" ] || [ ! -e " +
                             file +
                             " ]; then kill $run; cat log; exit 99; fi\n"
                             "kill -9 \"$pid\"\n"
                             "wait $run; code=$?\n"
                             "cat log; exit $code\n";
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(280);
  return test::runProcess({"sh", "-c", script}, o);
}

TEST(PsMultiprocess, ThreeWorkersAndAServerLearnFashionMnistWithAStraggler) {
  const std::string dir = test::makeTempDir();
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(280);
  auto r = test::runProcess({"sh", "-c",
                             "cd " + quote(dir) + " && exec " +
                                 command("ps.staleness=3 trainer.max_steps=40 trainer.log_every=20 testing.slow_rank=2 "
                                         "testing.slow_factor=2 monitor.dir=run")},
                            o);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_HAS(r.err, "3 worker(s) and 1 parameter server(s) (ranks 3..3), staleness bound 3");
  EXPECT_HAS(r.err, "done: 120 updates");
  // No update of any server passed the bound (the histogram has bins 0..3 by construction).
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.err, m, std::regex(R"(staleness of the updates \(bound 3, largest (\d+)\): ([^;]*);)")))
      << r.err;
  EXPECT_LE(std::stoi(m[1].str()), 3) << "an update passed the bound";
  EXPECT_TRUE(std::regex_match(m[2].str(), std::regex(R"(0: \d+, 1: \d+, 2: \d+, 3: \d+)"))) << m[2];
  // The run directory keeps the histogram for the dashboard: every update, bins 0..3, a wait per worker.
  std::ifstream runJson(dir + "/run/run.json");
  ASSERT_TRUE(runJson.good()) << "no run.json under monitor.dir";
  const auto ps = nlohmann::json::parse(runJson).at("ps");
  EXPECT_EQ(ps.at("staleness_bound").get<int>(), 3);
  EXPECT_LE(ps.at("max_staleness").get<int>(), 3);
  const auto counts = ps.at("staleness").get<std::vector<int64_t>>();
  ASSERT_EQ(counts.size(), 4u) << ps.dump();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), 120) << ps.dump();
  EXPECT_EQ(ps.at("wait_seconds").size(), 3u) << ps.dump();
  auto pos = r.out.find("validation accuracy ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(pos + 20)), 50.0) << r.out;
}

TEST(PsMultiprocess, AKilledServerEndsTheRunNamingIt) {
  const std::string dir = test::makeTempDir();
  // Start the run, wait for its first checkpoint, SIGKILL rank 3 (the server) by the pid the
  // launcher's first line gives (Gloo: it names every rank's); the launcher stops the workers and
  // names rank 3.
  auto r = runKillingServerWhen(
      dir,
      command("ps.staleness=2 trainer.max_steps=100000 trainer.log_every=5 checkpoint.dir=ck checkpoint.every=2",
              "--backend gloo"),
      "ck/step-000000006.ckpt");
  EXPECT_FALSE(r.timedOut);
  EXPECT_NE(r.exitCode, 0) << r.out;
  EXPECT_NE(r.exitCode, 99) << "no progress line, or no pid of rank 3:\n" << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(rank 3 \(pid \d+\) was killed by SIGKILL.*first worker to fail)")))
      << r.out;
}

TEST(PsMultiprocess, AKilledServerIsRestartedAndTheRunResumesFromItsCheckpoint) {
  const std::string dir = test::makeTempDir();
  // 100 synchronous steps = 300 updates, a checkpoint every 15; the server dies after the one of 30.
  auto r = runKillingServerWhen(
      dir,
      command("ps.staleness=2 trainer.max_steps=100 trainer.log_every=50 checkpoint.dir=ck checkpoint.every=5",
              "--backend gloo --max-restarts 1"),
      "ck/step-000000030.ckpt");
  test::ProcessOptions o;  // for the DDP run below
  o.timeout = std::chrono::seconds(280);
  ASSERT_EQ(r.exitCode, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(rank 3 \(pid \d+\) was killed by SIGKILL)"))) << r.out;
  EXPECT_HAS(r.out, "restarting all 4 worker(s) of node 0 (restart 1 of 1)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(resumed from ck/step-0*(\d+)\.ckpt: step (\d+))"))) << r.out;
  const int from = std::stoi(m[1].str());
  EXPECT_GE(from, 30) << r.out;
  EXPECT_EQ(from % 15, 0) << r.out;
  EXPECT_HAS(r.out, fmt::format("300 updates (468 per epoch), from update {}", from + 1));
  EXPECT_HAS(r.out, "done: 300 updates");
  // The servers' last checkpoint is a Trainer checkpoint: two DDP workers continue from it.
  const std::string bin = test::lockstepBin();
  auto ddp =
      test::runProcess({"sh", "-c",
                        "cd " + quote(dir) + " && exec " + quote(bin) + " run -np 2 -- " + quote(bin) + " train " +
                            quote(std::string(LOCKSTEP_SOURCE_DIR) + "/configs/fashion_convnet.yaml") +
                            " checkpoint.dir=ck monitor.dir=off trainer.max_steps=302 trainer.validate=false"},
                       o);
  ASSERT_EQ(ddp.exitCode, 0) << ddp.err;
  EXPECT_HAS(ddp.err, "resumed from ck/step-000000300.ckpt: step 300");
  EXPECT_HAS(ddp.err, "continuing epoch 0 at micro-batch 150");
}

}  // namespace
}  // namespace lockstep

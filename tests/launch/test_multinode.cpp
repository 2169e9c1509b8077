// Several hosts on one machine: each "host" is a network namespace with its own
// interface and address (10.77.x.1, .2, .3) on a bridge in a switch namespace.
// Workers really talk over those veth links, the launcher really starts the
// other nodes through a remote shell (ip netns exec standing in for ssh), and a
// link is really taken down in the middle of a run. Needs root (CI runs as root);
// skipped with the reason otherwise.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "support/expect.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::ProcessOptions;
using test::ProcessResult;
using test::runProcess;

bool sh(const std::string& command) { return runProcess({"sh", "-c", command + " >/dev/null 2>&1"}).exitCode == 0; }

/// Namespaces <p>-sw (a bridge) and <p>-h0..h(n-1), host i at 10.77.<subnet>.(i+1)/24.
class Hosts {
 public:
  explicit Hosts(int n) {
    static std::atomic<int> counter{0};
    subnet_ = (::getpid() + counter++) % 200 + 20;
    prefix_ = "ls" + std::to_string(::getpid()) + "-" + std::to_string(subnet_);
    ok_ = sh("ip netns add " + sw()) && sh("ip -n " + sw() + " link add br0 type bridge") &&
          sh("ip -n " + sw() + " link set br0 up");
    for (int i = 0; ok_ && i < n; ++i) {
      std::string ns = host(i);
      ok_ = sh("ip netns add " + ns) &&
            sh("ip -n " + sw() + " link add v" + std::to_string(i) + " type veth peer name eth0 netns " + ns) &&
            sh("ip -n " + sw() + " link set v" + std::to_string(i) + " master br0 up") &&
            sh("ip -n " + ns + " addr add " + address(i) + "/24 dev eth0") && sh("ip -n " + ns + " link set eth0 up") &&
            sh("ip -n " + ns + " link set lo up");
      count_ = i + 1;
    }
    // No spanning tree on the bridge (the default): its ports forward at once.
  }
  ~Hosts() {
    for (int i = 0; i < count_; ++i) {
      sh("ip netns pids " + host(i) + " | xargs -r kill -9");
      sh("ip netns del " + host(i));
    }
    sh("ip netns del " + sw());
  }
  bool ok() const { return ok_; }
  std::string host(int i) const { return prefix_ + "-h" + std::to_string(i); }
  std::string address(int i) const { return "10.77." + std::to_string(subnet_) + "." + std::to_string(i + 1); }
  std::string sw() const { return prefix_ + "-sw"; }
  /// Takes host i's cable out: its port on the switch goes down.
  bool unplug(int i) const { return sh("ip -n " + sw() + " link set v" + std::to_string(i) + " down"); }
  /// "addr=ns,..." for netns_rsh.sh
  std::string map() const {
    std::string m;
    for (int i = 0; i < count_; ++i) m += (m.empty() ? "" : ",") + address(i) + "=" + host(i);
    return m;
  }

 private:
  std::string prefix_;
  int subnet_ = 0;
  int count_ = 0;
  bool ok_ = false;
};

bool canMakeHosts() { return ::geteuid() == 0 && sh("command -v ip"); }

#define REQUIRE_NETNS()                                                                               \
  LOCKSTEP_SKIP_UNLESS(canMakeHosts(), "root and iproute2 for network namespaces (CI runs as root)"); \
  Hosts hosts(kHosts);                                                                                \
  ASSERT_TRUE(hosts.ok()) << "could not build the namespaces (ip netns/veth/bridge)"

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const std::string kConfig =
    test::tinyNamesConfig("  max_steps: 24\n  log_every: 4\n",
                          "checkpoint:\n  dir: ckpt\n  every: 8\n  keep_last: 2\nmonitor:\n  dir: \"off\"\n");

std::string runDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << kConfig;
  return dir;
}

TEST(MultiNode, TwoHostsOverVethMatchTheSingleHostRunBitForBit) {
  constexpr int kHosts = 2;
  REQUIRE_NETNS();
  std::string bin = test::lockstepBin();
  // One host, two workers, one thread each.
  std::string single = runDir();
  auto a = runProcess({"sh", "-c",
                       "cd " + quote(single) + " && exec " + quote(bin) + " run -np 2 --threads 1 -- " + quote(bin) +
                           " train tiny.yaml"},
                      ProcessOptions{{}, {}, 180s});
  ASSERT_EQ(a.exitCode, 0) << a.err;

  // Two hosts, one worker each, started from here with -H through the netns "ssh".
  std::string multi = runDir();
  ProcessOptions o;
  o.setEnv = {{"LOCKSTEP_TEST_NETNS", hosts.map()}};
  o.timeout = 180s;
  auto b = runProcess(
      {"sh", "-c",
       "cd " + quote(multi) + " && exec " + quote(bin) + " run -H " + hosts.address(0) + ":1," + hosts.address(1) +
           ":1 --rsh " + LOCKSTEP_NETNS_RSH + " --threads 1 --comm-timeout 60 -- " + quote(bin) + " train tiny.yaml"},
      o);
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_HAS(b.err, "lockstep run: node 0 on " + hosts.address(0) + ": ranks 0..0");
  EXPECT_HAS(b.err, "lockstep run: node 1 on " + hosts.address(1) + ": ranks 1..1");
  EXPECT_HAS(b.err, "lockstep run: node 1 of 2 (");
  EXPECT_HAS(b.err, "training on 2 worker(s)");
  std::string last = "/ckpt/step-000000024.ckpt";
  ASSERT_TRUE(fs::exists(multi + last)) << b.err;
  EXPECT_TRUE(readAll(single + last) == readAll(multi + last))
      << "the run across two hosts ended with other parameters than the run on one host";

  // Again, with the worker on host 1 SIGKILLed at step 11: its node restarts it, rank 0's
  // node sees the peer fail and restarts too, both resume from step 8 and end the same.
  std::string restarted = runDir();
  o.setEnv["LOCKSTEP_FAULT_KILL_AT_STEP"] = "11";
  o.setEnv["LOCKSTEP_FAULT_KILL_RANK"] = "1";
  auto c = runProcess({"sh", "-c",
                       "cd " + quote(restarted) + " && exec " + quote(bin) + " run -H " + hosts.address(0) + ":1," +
                           hosts.address(1) + ":1 --rsh " + LOCKSTEP_NETNS_RSH +
                           " --max-restarts 1 --threads 1 --comm-timeout 60 -- " + quote(bin) + " train tiny.yaml"},
                      o);
  ASSERT_EQ(c.exitCode, 0) << c.err;
  EXPECT_HAS(c.err, "restarting all 1 worker(s) of node 1 (restart 1 of 1)");
  EXPECT_HAS(c.err, "restarting all 1 worker(s) of node 0 (restart 1 of 1)");
  EXPECT_HAS(c.err, "resumed from ckpt/step-000000008.ckpt: step 8");
  EXPECT_TRUE(readAll(single + last) == readAll(restarted + last))
      << "the restarted two-host run ended with other parameters than the run on one host";
}

/// Starts `lockstep run --nnodes N --node-rank K ...` inside host K's namespace (torchrun's model).
std::future<ProcessResult> startNode(const Hosts& hosts, int k, int nodes, int port, const std::string& tokenFile,
                                     const std::vector<std::string>& program, double commTimeout) {
  std::vector<std::string> argv{"ip",
                                "netns",
                                "exec",
                                hosts.host(k),
                                test::lockstepBin(),
                                "run",
                                "--nnodes",
                                std::to_string(nodes),
                                "--node-rank",
                                std::to_string(k),
                                "--master-addr",
                                hosts.address(0),
                                "--master-port",
                                std::to_string(port),
                                "-np",
                                "1",
                                "--token-file",
                                tokenFile,
                                "--comm-timeout",
                                std::to_string(commTimeout),
                                "--stop-grace",
                                "1",
                                "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  ProcessOptions o;
  o.timeout = 120s;
  o.setEnv = {{"LOCKSTEP_STALL_WARN_SECONDS", "2"}};
  return std::async(std::launch::async, [argv, o] { return runProcess(argv, o); });
}

TEST(MultiNode, UnpluggedHostFailsTheRunWithinTheTimeoutNamingTheLostRank) {
  constexpr int kHosts = 2;
  REQUIRE_NETNS();
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/token") << "a-shared-secret\n";
  constexpr double kTimeout = 6;
  auto node0 = startNode(hosts, 0, 2, 29611, dir + "/token", {test::helperBin("comm_worker"), "loop", dir}, kTimeout);
  auto node1 = startNode(hosts, 1, 2, 29611, dir + "/token", {test::helperBin("comm_worker"), "loop", dir}, kTimeout);
  // Both workers write their pid once they joined and started allreducing.
  for (int i = 0; i < 300 && !(fs::exists(dir + "/0.pid") && fs::exists(dir + "/1.pid")); ++i) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(fs::exists(dir + "/0.pid") && fs::exists(dir + "/1.pid")) << "the two nodes never connected";
  std::this_thread::sleep_for(500ms);
  auto unplugged = std::chrono::steady_clock::now();
  ASSERT_TRUE(hosts.unplug(1));
  ProcessResult r0 = node0.get();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - unplugged).count();
  ProcessResult r1 = node1.get();
  EXPECT_FALSE(r0.timedOut) << "node 0 hung after its peer's link went down";
  EXPECT_NE(r0.exitCode, 0) << r0.err;
  std::printf("[ info     ] node 0 exited %.2f s after the unplug (comm timeout %.0f s)\n", seconds, kTimeout);
  // Measured 6.12-6.23 s (three runs): the timeout, then the launcher's stop.
  EXPECT_LT(seconds, kTimeout + 2) << r0.err;
  // Rank 0 names the rank it lost: the stall inspector warns first, then the timeout names the peer.
  EXPECT_HAS(r0.err, "rank 1 has not submitted it yet");
  EXPECT_HAS(r0.err, "allreduce(sum) failed (timeout) on rank 0 of 2");
  EXPECT_HAS(r0.err, "peer: rank 1");
  EXPECT_HAS(r0.err, "lockstep run: rank 0 (pid");
  EXPECT_FALSE(r1.timedOut) << "the unplugged node hung";
  EXPECT_NE(r1.exitCode, 0) << r1.err;
  EXPECT_HAS(r1.err, "peer: rank 0");
}

TEST(MultiNode, NodesWithoutTheSharedTokenNeverJoin) {
  constexpr int kHosts = 2;
  REQUIRE_NETNS();
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/token") << "the-job-secret\n";
  std::ofstream(dir + "/guess") << "a-guess\n";
  auto node0 = startNode(hosts, 0, 2, 29612, dir + "/token", {test::helperBin("comm_worker"), "check"}, 20);
  auto stray = startNode(hosts, 1, 2, 29612, dir + "/guess", {test::helperBin("comm_worker"), "check"}, 20);
  ProcessResult s = stray.get();
  EXPECT_NE(s.exitCode, 0);
  EXPECT_HAS(s.err, "refused this process: wrong job token");
  // The real node 1 then joins and the job completes as if nothing happened.
  auto node1 = startNode(hosts, 1, 2, 29612, dir + "/token", {test::helperBin("comm_worker"), "check"}, 20);
  ProcessResult r0 = node0.get();
  ProcessResult r1 = node1.get();
  EXPECT_EQ(r0.exitCode, 0) << r0.err;
  EXPECT_EQ(r1.exitCode, 0) << r1.err;
  EXPECT_HAS(r0.out, "all checks passed on 2 ranks");
  EXPECT_HAS(r0.err, "rendezvous store: refused a connection from " + hosts.address(1));
}

}  // namespace
}  // namespace lockstep

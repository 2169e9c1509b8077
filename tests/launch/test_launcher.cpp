// `lockstep run` as a user runs it: real workers, real signals, real exit codes.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "launch/launch_commands.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"
#include "lockstep/launch/launcher.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

using detail::mpirunCommand;
using detail::remoteLaunchCommand;
using detail::resolveProgram;
using detail::shellQuote;
using test::lockstepBin;
using test::ProcessOptions;
using test::ProcessResult;
using test::runProcess;

ProcessResult run(const std::vector<std::string>& args, ProcessOptions o = {}) {
  std::vector<std::string> argv{lockstepBin(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  return runProcess(argv, o);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Launcher, PicksMasterPortsBelowTheEphemeralRange) {
  // Outgoing connections take their ports from the ephemeral range; a port picked there could be
  // taken before rank 0 listens on it (it happened in a busy suite run).
  int low = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  ASSERT_GT(low, 10000) << "this machine's ephemeral range starts at " << low;
  for (int i = 0; i < 20; ++i) {
    int port = detail::pickFreePort("127.0.0.1");
    EXPECT_GE(port, 10000);
    EXPECT_LT(port, low);
    EXPECT_TRUE(detail::portIsFree("127.0.0.1", port));
  }
}

TEST(Launcher, SuccessPrefixesEveryLineWithTheRank) {
  auto r = run({"-np", "3", "--", "sh", "-c", "echo out-$LOCKSTEP_RANK; echo err-$LOCKSTEP_RANK >&2"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(r.out, "[" + std::to_string(rank) + "] out-" + std::to_string(rank))) << r.out;
    EXPECT_TRUE(contains(r.err, "[" + std::to_string(rank) + "] err-" + std::to_string(rank))) << r.err;
  }
}

TEST(Launcher, SetsRendezvousAndThreadVariables) {
  ProcessOptions o;
  o.unsetEnv = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "LOCKSTEP_NUM_THREADS"};
  auto r = run({"-np", "2", "--threads", "3", "--comm-timeout", "7", "--", "sh", "-c",
                "echo vars $LOCKSTEP_RANK/$LOCKSTEP_WORLD_SIZE $LOCKSTEP_LOCAL_RANK/$LOCKSTEP_LOCAL_WORLD_SIZE "
                "$RANK/$WORLD_SIZE $MASTER_ADDR port=$LOCKSTEP_MASTER_PORT threads=$OMP_NUM_THREADS,"
                "$OPENBLAS_NUM_THREADS,$LOCKSTEP_NUM_THREADS timeout=$LOCKSTEP_COMM_TIMEOUT"},
               o);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[1] vars 1/2 1/2 1/2 127.0.0.1 port=")) << r.out;
  EXPECT_TRUE(contains(r.out, "threads=3,3,3 timeout=7")) << r.out;
  EXPECT_FALSE(contains(r.out, "port= ")) << "a port must be picked: " << r.out;
}

TEST(Launcher, DefaultThreadsAreCoresOverWorkersAndUserValuesWin) {
  ProcessOptions o;
  o.unsetEnv = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "LOCKSTEP_NUM_THREADS"};
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  auto r = run({"-np", "2", "--", "sh", "-c", "echo t=$OMP_NUM_THREADS"}, o);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "t=" + std::to_string(std::max(1L, cores / 2)))) << r.out;
  o.setEnv = {{"OMP_NUM_THREADS", "5"}};
  r = run({"-np", "2", "--", "sh", "-c", "echo t=$OMP_NUM_THREADS,$LOCKSTEP_NUM_THREADS"}, o);
  EXPECT_TRUE(contains(r.out, "t=5,5")) << r.out;
}

// --bind core: each worker on its own core, with both backends (mpirun's --bind-to core); without it
// every worker may run anywhere.
TEST(Launcher, BindCorePinsEachWorkerToItsOwnCores) {
  if (detail::usableCores() < 2) GTEST_FAIL() << "needs 2 cores to pin 2 workers apart";
  const std::vector<std::string> show{"--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  std::vector<std::string> backends{"gloo"};
  if (mpiBackendBuilt()) backends.push_back("mpi");
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend);
    std::vector<std::string> args{"-np", "2", "--threads", "1", "--bind", "core", "--backend", backend};
    args.insert(args.end(), show.begin(), show.end());
    auto r = run(args);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto cpus = [](int rank) { return std::to_string(detail::workerCpus(rank, 1).at(0)); };
    EXPECT_TRUE(contains(r.out, "[0] Cpus_allowed_list:\t" + cpus(0) + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "[1] Cpus_allowed_list:\t" + cpus(1) + "\n")) << r.out;
  }
  std::vector<std::string> args{"-np", "2", "--threads", "1", "--backend", "gloo"};
  args.insert(args.end(), show.begin(), show.end());
  auto r = run(args);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "[0] Cpus_allowed_list:\t" + std::to_string(detail::workerCpus(0, 1).at(0)) + "\n"))
      << "unbound workers may use every core: " << r.out;
  // The threads an exported OMP_NUM_THREADS gives each worker are the ones bound (and counted).
  ProcessOptions o;
  o.unsetEnv = {"LOCKSTEP_NUM_THREADS"};
  o.setEnv = {{"OMP_NUM_THREADS", std::to_string(detail::usableCores())}};
  r = run({"-np", "2", "--bind", "core", "--", "true"}, o);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, fmt::format("--bind core: 2 worker(s) x {} thread(s)", detail::usableCores()))) << r.err;
}

TEST(Launcher, FailedRankStopsTheOthersAndIsNamed) {
  auto r = run({"-np", "3", "--", "sh", "-c",
                "if [ \"$LOCKSTEP_RANK\" = 1 ]; then echo preparing >&2; echo boom-on-rank-1 >&2; exit 3; fi; "
                "exec sleep 60"});
  EXPECT_EQ(r.exitCode, 3) << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "first worker to fail")) << r.err;
  EXPECT_TRUE(contains(r.err, "    boom-on-rank-1")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 was killed by SIGTERM (stopped by the launcher)")) << r.err;
}

TEST(Launcher, WorkerKilledBySignalIsReported) {
  auto r = run({"-np", "2", "--", "sh", "-c", "if [ \"$LOCKSTEP_RANK\" = 0 ]; then kill -SEGV $$; fi; exec sleep 60"});
  EXPECT_EQ(r.exitCode, 128 + SIGSEGV) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by SIGSEGV")) << r.err;
  EXPECT_LT(r.seconds, 15);
}

TEST(Launcher, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  auto r = run({"-np", "2", "--stop-grace", "1", "--", "sh", "-c",
                "if [ \"$LOCKSTEP_RANK\" = 0 ]; then sleep 0.5; exit 4; fi; trap '' TERM; "
                "while true; do sleep 0.1; done"});
  EXPECT_EQ(r.exitCode, 4) << r.err;
  EXPECT_LT(r.seconds, 8) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 was killed by SIGKILL")) << r.err;
}

void forwardsSignal(int sig) {
  std::atomic<pid_t> pid{0};
  ProcessOptions o;
  o.pidOut = &pid;
  auto future = std::async(std::launch::async, [&] {
    return run({"-np", "2", "--", "sh", "-c",
                "trap 'echo got-signal-$LOCKSTEP_RANK; exit 0' INT TERM; echo ready; "
                "while true; do sleep 0.05; done"},
               o);
  });
  // Wait until the workers are up, then signal the launcher only.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_GT(pid.load(), 0);
  ::kill(pid.load(), sig);
  auto r = future.get();
  EXPECT_EQ(r.exitCode, 128 + sig) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[0] got-signal-0")) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[1] got-signal-1")) << r.out << r.err;
  EXPECT_LT(r.seconds, 10);
}

TEST(Launcher, ForwardsSigterm) { forwardsSignal(SIGTERM); }
TEST(Launcher, ForwardsSigint) { forwardsSignal(SIGINT); }

TEST(Launcher, KilledWorkerInCollectiveLoopEndsTheRunQuickly) {
  // The acceptance case: kill one of 3 workers in an allreduce loop.
  std::string dir = test::makeTempDir();
  auto future = std::async(std::launch::async, [&] {
    // Gloo: the launcher itself owns the workers here (under mpirun, mpirun does; test_comm_multiprocess).
    return run(
        {"-np", "3", "--backend", "gloo", "--comm-timeout", "60", "--", test::helperBin("comm_worker"), "loop", dir});
  });
  pid_t victim = 0;
  for (int i = 0; i < 300 && victim == 0; ++i) {
    std::ifstream in(dir + "/1.pid");
    if (!(in >> victim)) victim = 0;
    if (victim == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(victim, 0) << "worker 1 never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto killedAt = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  auto r = future.get();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killedAt).count();
  EXPECT_LT(seconds, 30) << r.err;
  EXPECT_LT(seconds, 10) << "slower than expected: " << r.err;
  EXPECT_NE(r.exitCode, 0);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (pid " + std::to_string(victim) + ") was killed by SIGKILL")) << r.err;
}

struct BadArgs {
  std::vector<std::string> args;
  std::string message;
};

class LauncherBadArgs : public ::testing::TestWithParam<BadArgs> {};

TEST_P(LauncherBadArgs, OneLineErrorUsageAndExitCode2) {
  auto r = run(GetParam().args);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "lockstep run: error: " + GetParam().message)) << r.err;
  EXPECT_TRUE(contains(r.err, "usage: lockstep run -np N")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LauncherBadArgs,
    ::testing::Values(
        BadArgs{{"-np", "0", "--", "true"}, "-np 0: the number of workers must be at least 1"},
        BadArgs{{"-np", "-3", "--", "true"}, "-np -3"},
        BadArgs{{"-np", "5000", "--", "true"}, "-np 5000: more than 1024 workers on one node"},
        BadArgs{{"-H", "a:2,-oProxyCommand=x:2", "--", "true"},
                "-H entry '-oProxyCommand=x:2': a host name cannot start with '-'"},
        BadArgs{{"-H", "a:2,b c:2", "--", "true"}, "-H entry 'b c:2': a host name cannot contain blanks"},
        BadArgs{{"-np", "2", "--bogus", "--", "true"}, "unknown option '--bogus'"},
        BadArgs{{"-np", "2", "--bogus", "true"}, "unknown option '--bogus'"},
        BadArgs{{"-np", "two", "--", "true"},
                "-np 'two': expected a number of workers or gpu (one worker per visible GPU)"},
        BadArgs{{"-np", "2"}, "missing the program to run"},
        BadArgs{{"-np", "2", "--", "/no/such/program"}, "program '/no/such/program' not found"},
        BadArgs{{"-np", "2", "--", "no-such-program-xyz"}, "program 'no-such-program-xyz' not found"},
        BadArgs{{"-np", "2", "--nnodes", "2", "--", "true"}, "--master-port is required with --nnodes > 1"},
        BadArgs{{"-np", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "1234", "--", "true"},
                "--node-rank 2: must be in 0..1"},
        BadArgs{{"-np", "2", "--master-port", "70000", "--", "true"}, "--master-port 70000"},
        BadArgs{{"-np", "2", "--backend", "carrier-pigeon", "--", "true"},
                "--backend carrier-pigeon: expected gloo, mpi, nccl or auto"},
        BadArgs{{"-np", "1024", "--backend", "nccl", "--", "true"}, "--backend nccl: 1024 worker(s) on this node, "},
        BadArgs{{"-np", "2", "--backend", "mpi", "--nnodes", "2", "--master-port", "1234", "--", "true"},
                "--backend mpi starts workers on this node only"},
        BadArgs{{"-np", "2", "--nnodes", "2", "--master-port", "1234", "--", "true"},
                "--nnodes 2: every node must hold the same job token"},
        BadArgs{{"-np", "2", "--token-file", "/no/such/token", "--", "true"},
                "--token-file: cannot read the job token file '/no/such/token'"},
        BadArgs{{"-np", "2", "--max-restarts", "-1", "--", "true"}, "--max-restarts -1: must be 0 or more"},
        BadArgs{{"-np", "2", "--bind", "socket", "--", "true"}, "--bind: socket not in {none,core}"},
        BadArgs{{"-np", "64", "--threads", "1", "--bind", "core", "--", "true"},
                "--bind core: 64 worker(s) x 1 thread(s) need 64 cores"},
        BadArgs{{"-H", "a:2,b:1", "--", "true"}, "-H: every host needs the same number of slots"},
        BadArgs{{"-H", "a:2,,b:2", "--", "true"}, "-H 'a:2,,b:2': empty host in entry 2"},
        BadArgs{{"-H", "a:x", "--", "true"}, "-H entry 'a:x': slots"},
        BadArgs{{"-H", "a:2,b:2", "-np", "3", "--", "true"}, "-np 3 does not match -H a:2,b:2 (4 slots"},
        BadArgs{{"-H", "a:2", "--rsh", "no-such-rsh", "--", "true"}, "--rsh: 'no-such-rsh' not found"}));

TEST(Launcher, RestartsAreBoundedByMaxRestarts) {
  // A fault that recurs in every attempt: two restarts, then the launcher gives up with the cause.
  auto r = run({"-np", "2", "--max-restarts", "2", "--", "sh", "-c",
                "echo attempt $LOCKSTEP_RESTART_COUNT; [ $LOCKSTEP_RANK = 1 ] && exit 7; sleep 30"});
  EXPECT_EQ(r.exitCode, 7) << r.err;
  for (const char* line : {"[1] attempt 0", "[1] attempt 1", "[1] attempt 2"})
    EXPECT_TRUE(contains(r.out, line)) << r.out;
  EXPECT_FALSE(contains(r.out, "attempt 3")) << r.out;
  EXPECT_TRUE(contains(r.err, "lockstep run: rank 1 failed; restarting all 2 worker(s) of node 0 (restart 2 of 2)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "giving up: the group failed 3 time(s) and --max-restarts is 2")) << r.err;
  EXPECT_LT(r.seconds, 25) << "the surviving rank was not stopped after each failure";
}

TEST(Launcher, WorkerCountsAreNumbersOrOnePerGpu) {
  EXPECT_EQ(detail::parseWorkerCount("3", 0), 3);
  EXPECT_EQ(detail::parseWorkerCount("gpu", 8), 8);
  EXPECT_THROW(detail::parseWorkerCount("3x", 8), ConfigError);
  EXPECT_THROW(detail::parseWorkerCount("", 8), ConfigError);
  // Through the command line, with every GPU hidden from the CUDA runtime.
  ProcessOptions hidden;
  hidden.setEnv = {{"CUDA_VISIBLE_DEVICES", ""}};
  auto none = run({"-np", "gpu", "--", "true"}, hidden);
  EXPECT_EQ(none.exitCode, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "-np gpu: no CUDA device is visible (CUDA_VISIBLE_DEVICES is ''); give the number"))
      << none.err;
  // Without -np the default is one worker per visible GPU; with none visible, -np is required.
  auto unset = run({"--", "true"}, hidden);
  EXPECT_EQ(unset.exitCode, 2) << unset.err;
  EXPECT_TRUE(contains(unset.err,
                       "-np N is required (the number of workers on this node; without it lockstep run "
                       "starts one worker per visible GPU, and no GPU is visible)"))
      << unset.err;
}

TEST(Launcher, HostListsParse) {
  auto hosts = parseHosts("node1:2,10.0.0.7,[fe80::1]:3");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "10.0.0.7");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[2].host, "fe80::1");
  EXPECT_EQ(hosts[2].slots, 3);
}

TEST(Launcher, RemoteCommandQuotesForTheShellAndCarriesNoToken) {
  LaunchOptions o;
  o.hosts = {{"a", 2}, {"b", 2}};
  o.nprocPerNode = 2;
  o.masterAddr = "a";
  o.masterPort = 29500;
  o.maxRestarts = 1;
  o.token = "s3cret-token";
  o.command = {"/bin/echo", "it's", "two words", "$HOME"};
  std::string cmd =
      remoteLaunchCommand(o, 1, "/opt/lockstep/bin/lockstep", "/work dir", {{"LOCKSTEP_LOG_LEVEL", "debug"}});
  EXPECT_EQ(cmd.find("s3cret"), std::string::npos) << cmd;
  EXPECT_TRUE(contains(cmd, "--nnodes 2 --node-rank 1 --master-addr a --master-port 29500 -np 2 --token-stdin")) << cmd;
  EXPECT_TRUE(contains(cmd, "--max-restarts 1")) << cmd;
  EXPECT_FALSE(contains(cmd, "--bind")) << cmd;
  o.bindCores = true;
  EXPECT_TRUE(contains(remoteLaunchCommand(o, 1, "/opt/lockstep/bin/lockstep", "/w", {}), "--bind core"));
  EXPECT_TRUE(contains(cmd, "LOCKSTEP_LOG_LEVEL=debug")) << cmd;
  // What the remote shell runs: the program must receive its arguments unchanged.
  o.command = {"/bin/echo", "it's", "two words", "$HOME"};
  std::string echo;
  for (const auto& word : o.command) echo += (echo.empty() ? "" : " ") + shellQuote(word);
  auto r = runProcess({"sh", "-c", echo});
  EXPECT_EQ(r.out, "it's two words $HOME\n");
  EXPECT_EQ(shellQuote("plain-word_1.2:3"), "plain-word_1.2:3");
}

TEST(Launcher, TheJobTokenReachesHostsOnlyThroughStdin) {
  // -H through an rsh that records its arguments and environment, then runs the remote command here.
  std::string record = test::makeTempDir();
  std::string secret = "job-token-that-must-not-leak-0123456789abcdef";
  ProcessOptions o;
  o.setEnv = {{"LOCKSTEP_JOB_TOKEN", secret}, {"LOCKSTEP_TEST_RSH_RECORD", record}};
  std::string port = std::to_string(detail::pickFreePort("127.0.0.1"));
  auto r = run({"-H", "127.0.0.1:1,localhost:1", "--rsh", LOCKSTEP_RECORDING_RSH, "--master-port", port, "--", "sh",
                "-c", "printf %s \"$LOCKSTEP_JOB_TOKEN\" | sha256sum"},
               o);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  ProcessOptions hashOptions;
  hashOptions.setEnv = {{"S", secret}};
  std::string hash = runProcess({"sh", "-c", "printf %s \"$S\" | sha256sum"}, hashOptions).out;
  ASSERT_EQ(hash.size(), 68u) << hash;
  hash = hash.substr(0, 64);
  EXPECT_TRUE(contains(r.out, "[0] " + hash)) << "rank 0 did not get the job's token: " << r.out;
  EXPECT_TRUE(contains(r.out, "[1] " + hash)) << "rank 1 did not get the job's token: " << r.out;
  int recorded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(record)) {
    std::ifstream in(entry.path());
    std::string handed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(handed, "--token-stdin")) << handed;
    EXPECT_FALSE(contains(handed, secret)) << "the token was handed to rsh:\n" << handed;
    EXPECT_FALSE(contains(handed, "LOCKSTEP_JOB_TOKEN=")) << handed;  // not even empty or as a file's name
    EXPECT_FALSE(contains(handed, "LOCKSTEP_JOB_TOKEN_FILE")) << handed;
    ++recorded;
  }
  EXPECT_EQ(recorded, 2);
}

TEST(Launcher, MpiBackendCommandLine) {
  LaunchOptions o;
  o.nprocPerNode = 3;
  o.command = {"./train", "--flag"};
  o.mpirunArgs = {"--mca", "btl", "self,vader"};
  auto argv = mpirunCommand(o, 2, true);
  std::vector<std::string> want{
      "mpirun",          "-np",   "3",   "--tag-output", "--bind-to", "none",  "--allow-run-as-root",
      "--oversubscribe", "--mca", "btl", "self,vader",   "./train",   "--flag"};
  EXPECT_EQ(argv, want);
  argv = mpirunCommand(o, 4, false);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--oversubscribe"), 0);
  o.bindCores = true;
  o.threadsPerWorker = 2;
  argv = mpirunCommand(o, 8, false);
  const std::vector<std::string> bound{"--tag-output", "--map-by", "slot:PE=2", "--bind-to", "core"};
  EXPECT_TRUE(std::search(argv.begin(), argv.end(), bound.begin(), bound.end()) != argv.end()) << argv.size();
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--allow-run-as-root"), 0);
}

TEST(Launcher, BackendChoiceAndItsReason) {
  using detail::BackendFacts;
  using detail::chooseBackend;
  BackendFacts lockstep{"lockstep", true, 2, 2, 1, false, true, true};
  // Left out: auto. A lockstep program, 2 workers on one node, MPI built, mpirun found: MPI.
  auto c = chooseBackend("", lockstep);
  EXPECT_EQ(c.backend, Backend::kMpi);
  EXPECT_EQ(c.reason, "the default, auto: one node, OpenMPI's shared memory between the workers");
  c = chooseBackend("", BackendFacts{"python3", false, 2, 2, 1, false, true, true});
  EXPECT_EQ(c.backend, Backend::kGloo);
  EXPECT_EQ(c.reason, "the default, auto: python3 does not link lockstep; it gets the lockstep and torchrun variables");
  auto with = [&](auto change) {
    BackendFacts f = lockstep;
    change(f);
    return chooseBackend("", f);
  };
  EXPECT_EQ(with([](BackendFacts& f) { f.nnodes = 2; }).backend, Backend::kGloo);
  EXPECT_EQ(with([](BackendFacts& f) { f.hostsGiven = true; }).reason,
            "the default, auto: workers on several nodes talk over TCP");
  EXPECT_EQ(with([](BackendFacts& f) { f.workers = 1; }).reason,
            "the default, auto: one worker has nothing to communicate");
  EXPECT_EQ(with([](BackendFacts& f) { f.workers = 4; }).reason,
            "the default, auto: 4 workers on 2 cores: MPI's busy waiting would take the cores from compute");
  EXPECT_EQ(with([](BackendFacts& f) { f.mpiBuilt = false; }).reason,
            "the default, auto: this lockstep was built without MPI");
  EXPECT_EQ(with([](BackendFacts& f) { f.mpirunFound = false; }).backend, Backend::kGloo);
  // Elastic: the generations re-form over gloo, GPUs or not (mpi cannot shrink; --backend mpi is refused).
  EXPECT_EQ(with([](BackendFacts& f) {
              f.elastic = true;
              f.gpus = 2;
            }).reason,
            "the default, auto: an elastic job (--min-np) forms each generation's communicator over gloo");
  // A GPU of its own for every worker: NCCL, across nodes too; fewer GPUs than workers: not.
  EXPECT_EQ(with([](BackendFacts& f) { f.gpus = 2; }).reason,
            "the default, auto: every worker has a GPU of its own (2 visible on this node)");
  EXPECT_EQ(with([](BackendFacts& f) { f.gpus = 2; }).backend, Backend::kNccl);
  EXPECT_EQ(with([](BackendFacts& f) {
              f.gpus = 8;
              f.workers = 1;
              f.nnodes = 2;
            }).backend,
            Backend::kNccl);
  EXPECT_EQ(with([](BackendFacts& f) { f.gpus = 1; }).backend, Backend::kMpi);
  EXPECT_EQ(with([](BackendFacts& f) {
              f.gpus = 1;
              f.workers = 1;
            }).backend,
            Backend::kGloo);
  EXPECT_EQ(chooseBackend("", BackendFacts{"python3", false, 2, 2, 1, false, true, true, 2}).backend, Backend::kGloo);
  EXPECT_EQ(chooseBackend("auto", lockstep).reason,
            "--backend auto: one node, OpenMPI's shared memory between the workers");
  EXPECT_EQ(chooseBackend("gloo", lockstep).reason, "--backend gloo");
  EXPECT_EQ(chooseBackend("mpi", BackendFacts{"sh", false, 1, 2, 3, false, true, true}).backend,
            Backend::kMpi);  // validateLaunchOptions refuses it
  // The lockstep binary is one; a shell is not.
  EXPECT_TRUE(detail::isLockstepProgram(test::lockstepBin()));
  EXPECT_FALSE(detail::isLockstepProgram(detail::resolveProgram("sh")));
  EXPECT_FALSE(detail::isLockstepProgram(""));
}

TEST(Launcher, TheFirstLineNamesTheBackend) {
  auto r = run({"-np", "2", "--", "true"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err.rfind("lockstep run: backend gloo (the default, auto: true does not link lockstep", 0), 0u) << r.err;
  r = run({"-np", "2", "--", test::lockstepBin(), "--version"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err.rfind("lockstep run: backend mpi (the default, auto: one node", 0), 0u) << r.err;
  r = run({"-np", "2", "--backend", "gloo", "--", "true"});
  EXPECT_EQ(r.err.rfind("lockstep run: backend gloo (--backend gloo)\n", 0), 0u) << r.err;
}

TEST(Launcher, MpiBackendPrefixesRanksAndReassemblesSplitLines) {
  // A line written in pieces reaches mpirun as several chunks; each rank's lines must come out whole.
  auto r = run({"-np", "2", "--backend", "mpi", "--", "sh", "-c",
                "printf 'part-'; sleep 0.2; printf 'one\\n'; printf 'err-' >&2; sleep 0.1; echo 'two' >&2"});
  EXPECT_EQ(r.exitCode, 0) << r.err;
  for (int rank : {0, 1}) {
    EXPECT_TRUE(contains(r.out, "[" + std::to_string(rank) + "] part-one\n")) << r.out;
    EXPECT_TRUE(contains(r.err, "[" + std::to_string(rank) + "] err-two\n")) << r.err;
  }
}

TEST(Launcher, PortInUseIsRejected) {
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(sock, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port = std::to_string(ntohs(addr.sin_port));
  auto r = run({"-np", "2", "--master-port", port, "--", "true"});
  ::close(sock);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--master-port " + port + ": 127.0.0.1:" + port + " is already in use")) << r.err;
}

TEST(Launcher, ExecFailureIsReportedAsExit127) {
  std::string dir = test::makeTempDir();
  std::string script = dir + "/not-runnable";
  {
    std::ofstream out(script);
    out << "#!/no/such/interpreter\n";
  }
  ::chmod(script.c_str(), 0755);
  auto r = run({"-np", "2", "--", script});
  EXPECT_EQ(r.exitCode, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot execute")) << r.err;
}

TEST(Launcher, ResolveProgramFollowsPath) {
  EXPECT_FALSE(resolveProgram("sh").empty());
  EXPECT_TRUE(resolveProgram("definitely-not-a-program-xyz").empty());
  EXPECT_TRUE(resolveProgram("/etc/passwd").empty());  // exists, not executable
}

}  // namespace
}  // namespace lockstep

// cmd_run.cpp — `lockstep run`: argument parsing around launch().
#include <CLI/CLI.hpp>

#include <iostream>

#include <fmt/format.h>
#include "cli/commands.h"
#include "lockstep/comm/communicator.h"

#include "launch/launch_commands.h"
#include "lockstep/common/device.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"
#include "lockstep/launch/launcher.h"

namespace lockstep::cli {

namespace {
constexpr const char* kRunUsage =
    "usage: lockstep run -np N|gpu [--nnodes M --node-rank K] [--master-addr A] [--master-port P]\n"
    "                    [-H host1:slots,host2:slots [--rsh CMD]] [--iface IF] [--token-file F]\n"
    "                    [--max-restarts R] [--min-np A [--max-np B] [--host-discovery CMD]] [--threads T]\n"
    "                    [--comm-timeout S] [--stop-grace S] [--no-prefix]\n"
    "                    [--bind none|core]\n"
    "                    [--backend gloo|mpi|nccl|auto] [--mpirun-args ARGS] -- PROGRAM [ARGS...]";

/// "a b  c" -> {"a", "b", "c"} (options that carry a command line in one string).
std::vector<std::string> splitWords(const std::string& text) {
  std::vector<std::string> words;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

/// What the command line says, before it becomes LaunchOptions.
struct RunArgs {
  LaunchOptions launch;
  CLI::Option* np = nullptr;
  std::string npText;  ///< -np: a number, or gpu
  double stopGraceSeconds = 5.0;
  int threads = 0;
  std::string bind = "none";
  double commTimeout = 0;
  bool noPrefix = false;
  std::string backend;  ///< empty: not given
  std::string mpirunArgs;
  std::string hosts;
  std::string rsh;
  std::string tokenFile;
};

void addRunOptions(CLI::App& app, RunArgs& r) {
  LaunchOptions& o = r.launch;
  r.np = app.add_option(
      "-n,--np,--nproc-per-node", r.npText,
      "workers on this node (-np N, or -np gpu: one per visible GPU, the default where a GPU is visible); with -H "
      "the total, or left out");
  app.add_option("-H,--hosts", r.hosts, "start workers on these hosts over ssh: host1:slots,host2:slots");
  app.add_option("--rsh", r.rsh, "remote shell for -H (default \"ssh -o BatchMode=yes\"; env LOCKSTEP_RSH)");
  app.add_option("--iface", o.iface, "network interface Gloo uses (default: the one that reaches the master)");
  app.add_option("--token-file", r.tokenFile, "file whose first line is the job token (default: random per job)");
  app.add_flag("--token-stdin", o.tokenFromStdin, "(used by -H) read the token from stdin, stop when stdin closes");
  app.add_option("--max-restarts", o.maxRestarts,
                 "restart the whole group up to R times after a worker fails; it resumes from its checkpoint");
  app.add_option("--min-np", o.minNp,
                 "elastic: a lost worker does not stop the job while at least A workers run; the others re-form "
                 "at the new size (one node, gloo or nccl; docs/elastic.md)");
  app.add_option("--max-np", o.maxNp, "elastic: the most workers the job holds (default -np)");
  app.add_option("--host-discovery", o.hostDiscovery,
                 "elastic: a shell command printing HOST:SLOTS lines, run every --discovery-interval seconds; "
                 "this node's slots are the workers the job holds, up to --max-np");
  app.add_option("--discovery-interval", o.discoveryInterval, "seconds between runs of --host-discovery (default 2)");
  app.add_option("--nnodes", o.nnodes, "number of nodes (default 1)");
  app.add_option("--node-rank", o.nodeRank, "this node's index, 0..nnodes-1 (default 0)");
  app.add_option("--master-addr", o.masterAddr, "address of node 0 (default 127.0.0.1)");
  app.add_option("--master-port", o.masterPort, "rendezvous port on node 0 (default: a free one)");
  app.add_option("--threads", r.threads, "threads per worker (default: cores / workers)");
  app.add_option("--comm-timeout", r.commTimeout, "seconds before a collective fails (default 300)");
  app.add_option("--stop-grace", r.stopGraceSeconds, "seconds between SIGTERM and SIGKILL when stopping workers");
  app.add_flag("--no-prefix", r.noPrefix, "do not prefix output lines with [rank]");
  app.add_option("--bind", r.bind,
                 "core: pin each worker to its own cores (local rank i on cores i*T..i*T+T-1, T threads per worker; "
                 "mpirun's --bind-to core); none (default): the kernel places them")
      ->check(CLI::IsMember({"none", "core"}));
  app.add_option("--backend", r.backend,
                 "gloo: workers started here, tensors over TCP; mpi: workers started through mpirun, tensors over "
                 "OpenMPI (shared memory on one node); nccl: workers started here, each on a GPU of its own, tensors "
                 "over NCCL; auto (default): nccl for lockstep programs when every worker has its own GPU, else mpi "
                 "for lockstep programs on one node when built with MPI and mpirun is present, else gloo");
  app.add_option("--mpirun-args", r.mpirunArgs, "extra arguments for mpirun (with --backend mpi), one string");
}

/// The LaunchOptions the parsed arguments and `command` ask for; ConfigError names the bad flag.
LaunchOptions launchOptionsFrom(const RunArgs& r, const std::vector<std::string>& positional,
                                std::vector<std::string> command) {
  LaunchOptions o = r.launch;
  if (r.np->count() > 0)
    o.nprocPerNode = detail::parseWorkerCount(r.npText, r.npText == "gpu" ? visibleCudaDevices() : 0);
  if (!r.hosts.empty()) {
    o.hosts = parseHosts(r.hosts);
    int total = 0;
    for (const auto& h : o.hosts) total += h.slots;
    if (r.np->count() > 0 && o.nprocPerNode != total) {
      throw ConfigError(fmt::format("-np {} does not match -H {} ({} slots in all)", o.nprocPerNode, r.hosts, total));
    }
  } else if (r.np->count() == 0) {
    // Like torchrun's --nproc-per-node=gpu, the default where there are GPUs: one worker each.
    o.nprocPerNode = visibleCudaDevices();
    if (o.nprocPerNode == 0) {
      throw ConfigError(
          "-np N is required (the number of workers on this node; without it lockstep run starts one worker per "
          "visible GPU, and no GPU is visible)");
    }
  }
  const std::string rsh = r.rsh.empty() ? Environment::fromProcess().get("LOCKSTEP_RSH").value_or("") : r.rsh;
  if (!rsh.empty()) o.rsh = splitWords(rsh);
  if (!r.tokenFile.empty()) o.token = readTokenFile(r.tokenFile, "--token-file");
  if (!positional.empty() && positional[0].size() > 1 && positional[0][0] == '-') {
    throw ConfigError(fmt::format("unknown option '{}'", positional[0]));
  }
  if (r.stopGraceSeconds < 0)
    throw ConfigError(fmt::format("--stop-grace {}: must not be negative", r.stopGraceSeconds));
  command.insert(command.begin(), positional.begin(), positional.end());
  o.command = std::move(command);
  o.prefixOutput = !r.noPrefix;
  o.bindCores = r.bind == "core";
  if (r.threads != 0) o.threadsPerWorker = r.threads;
  if (r.commTimeout != 0) o.commTimeoutSeconds = r.commTimeout;
  o.stopGrace = std::chrono::milliseconds(static_cast<int64_t>(r.stopGraceSeconds * 1000));
  detail::BackendFacts facts;
  if (r.backend.empty() || r.backend == "auto") {  // a named backend needs no facts (the program is not read)
    facts.program = o.command.empty() ? std::string() : o.command[0];
    facts.isLockstep = detail::isLockstepProgram(detail::resolveProgram(facts.program));
    facts.workers = o.nprocPerNode;
    facts.cores = detail::usableCores();
    facts.nnodes = o.nnodes;
    facts.hostsGiven = !o.hosts.empty();
    facts.mpiBuilt = mpiBackendBuilt();
    facts.mpirunFound = !detail::resolveProgram("mpirun").empty();
    facts.gpus = facts.isLockstep ? visibleCudaDevices() : 0;
    facts.elastic = o.minNp > 0;
  }
  auto choice = detail::chooseBackend(r.backend, facts);
  o.backend = choice.backend;
  o.backendReason = choice.reason;
  o.mpirunArgs = splitWords(r.mpirunArgs);
  return o;
}

}  // namespace

int runCommand(const std::vector<std::string>& rawArgs) {
  // Split at the first "--": what follows is the program, never parsed here.
  std::vector<std::string> args;
  std::vector<std::string> command;
  bool sawSeparator = false;
  for (const auto& a : rawArgs) {
    if (!sawSeparator && a == "--") {
      sawSeparator = true;
      continue;
    }
    if (sawSeparator) command.push_back(a);
    // mpirun/horovodrun spell the worker count "-np"; CLI11 wants one dash per letter.
    else
      args.push_back(a == "-np" ? "--np" : a);
  }
  RunArgs r;
  CLI::App app{"Start N workers of PROGRAM with the rendezvous environment set", "lockstep run"};
  addRunOptions(app, r);
  // Without "--", the first non-option starts the program and the rest is its own.
  app.prefix_command();
  LaunchOptions o;
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
    o = launchOptionsFrom(r, app.remaining(), command);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << "\n" << kRunUsage << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "lockstep run: error: " << e.what() << "\n" << kRunUsage << "\n";
    return kExitUsage;
  } catch (const ConfigError& e) {
    std::cerr << "lockstep run: error: " << e.what() << "\n" << kRunUsage << "\n";
    return kExitUsage;
  }
  try {
    LaunchResult result = launch(o);
    std::cerr << result.summary;
    return result.exitCode;
  } catch (const ConfigError& e) {
    std::cerr << "lockstep run: error: " << e.what() << "\n" << kRunUsage << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "lockstep run: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace lockstep::cli

// The command lines the launcher builds and parses: -H host lists, the
// `lockstep run` a -H launcher starts on each host, the mpirun line of
// backend "mpi", and the default backend. Pure functions of the options (and
// of what this machine has), tested without processes.
#include "launch/launch_commands.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "lockstep/common/device.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep {
namespace {

/// More workers than this on one node is a typo, not a job (each is a process holding a model).
constexpr int kMaxWorkersPerNode = 1024;

}  // namespace

std::vector<HostSlots> parseHosts(const std::string& text) {
  std::vector<HostSlots> hosts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    std::string entry = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    HostSlots h;
    size_t colon = entry.rfind(':');
    // "host:N"; an IPv6 address needs brackets: "[fe80::1]:2".
    bool bracketed = !entry.empty() && entry.front() == '[';
    if (colon != std::string::npos && (!bracketed || colon > entry.find(']'))) {
      h.host = entry.substr(0, colon);
      h.slots =
          static_cast<int>(parseInt(entry.substr(colon + 1), fmt::format("-H entry '{}': slots", entry), 1, 4096));
    } else {
      h.host = entry;
    }
    if (bracketed && h.host.size() > 2 && h.host.back() == ']') h.host = h.host.substr(1, h.host.size() - 2);
    if (h.host.empty()) {
      throw ConfigError(fmt::format("-H '{}': empty host in entry {}; expected host[:slots],host[:slots],...", text,
                                    hosts.size() + 1));
    }
    // The host becomes an argument of the remote shell (ssh HOST ...): one starting with '-' would be
    // read as an option (ssh -oProxyCommand=...), and blanks or control characters split or end it.
    if (h.host.front() == '-') {
      throw ConfigError(
          fmt::format("-H entry '{}': a host name cannot start with '-' (the remote shell would read "
                      "it as an option)",
                      entry));
    }
    for (char c : h.host) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
        throw ConfigError(fmt::format("-H entry '{}': a host name cannot contain blanks or control characters", entry));
      }
    }
    hosts.push_back(h);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return hosts;
}

namespace detail {

void validateElastic(const LaunchOptions& o) {
  if (!o.hostDiscovery.empty() && o.minNp == 0) {
    throw ConfigError("--host-discovery: an elastic job's option; give --min-np (and --max-np) too");
  }
  if (!(o.discoveryInterval >= 0.1 && o.discoveryInterval <= 3600)) {
    throw ConfigError(fmt::format("--discovery-interval {}: expected seconds in 0.1..3600", o.discoveryInterval));
  }
  if (o.minNp == 0 && o.maxNp == 0) return;
  const int np = o.nprocPerNode * o.nnodes;
  if (o.minNp == 0) throw ConfigError(fmt::format("--max-np {}: an elastic job needs --min-np too", o.maxNp));
  if (o.minNp < 1 || o.minNp > np) {
    throw ConfigError(
        fmt::format("--min-np {}: must be between 1 and -np {} (the job starts with -np workers)", o.minNp, np));
  }
  if (o.maxNp != 0 && o.maxNp < np) {
    throw ConfigError(
        fmt::format("--max-np {}: must be at least -np {} (the job starts with -np workers)", o.maxNp, np));
  }
  if (o.backend == Backend::kMpi) {
    throw ConfigError(
        "--min-np: an MPI job cannot go on without a lost rank (OpenMPI does not shrink a running "
        "job); use --backend gloo, or --max-restarts to restart from the last checkpoint");
  }
  if (!o.hosts.empty() || o.nnodes > 1) {
    throw ConfigError("--min-np: elastic jobs run on one node (leave out -H and --nnodes; docs/elastic.md)");
  }
}

std::string remoteLaunchCommand(const LaunchOptions& o, int nodeRank, const std::string& selfPath,
                                const std::string& workingDir, const std::map<std::string, std::string>& forwardEnv) {
  std::vector<std::string> words{"cd", shellQuote(workingDir), "&&", "exec", "env"};
  for (const auto& [k, v] : forwardEnv) words.push_back(shellQuote(k + "=" + v));
  for (std::string w :
       {selfPath, std::string("run"), std::string("--nnodes"), std::to_string(o.hosts.size()),
        std::string("--node-rank"), std::to_string(nodeRank), std::string("--master-addr"), o.masterAddr,
        std::string("--master-port"), std::to_string(o.masterPort), std::string("-np"), std::to_string(o.nprocPerNode),
        std::string("--token-stdin"), std::string("--stop-grace"), fmt::format("{}", o.stopGrace.count() / 1000.0)}) {
    words.push_back(shellQuote(w));
  }
  if (o.threadsPerWorker) words.insert(words.end(), {"--threads", std::to_string(*o.threadsPerWorker)});
  if (o.bindCores) words.insert(words.end(), {"--bind", "core"});
  if (o.commTimeoutSeconds) words.insert(words.end(), {"--comm-timeout", fmt::format("{}", *o.commTimeoutSeconds)});
  if (o.maxRestarts > 0) words.insert(words.end(), {"--max-restarts", std::to_string(o.maxRestarts)});
  if (o.backend == Backend::kNccl) words.insert(words.end(), {"--backend", "nccl"});
  if (!o.iface.empty()) words.insert(words.end(), {"--iface", shellQuote(o.iface)});
  if (!o.prefixOutput) words.push_back("--no-prefix");
  words.push_back("--");
  for (const auto& c : o.command) words.push_back(shellQuote(c));
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> mpirunCommand(const LaunchOptions& o, int cores, bool asRoot) {
  std::vector<std::string> argv{"mpirun", "-np", std::to_string(o.nprocPerNode), "--tag-output"};
  if (o.bindCores) {
    // --bind core: each rank on its own T cores (processing elements); launch() resolves T.
    const int threads = o.threadsPerWorker.value_or(std::max(1, cores / o.nprocPerNode));
    argv.insert(argv.end(), {"--map-by", fmt::format("slot:PE={}", threads), "--bind-to", "core"});
  } else {
    // lockstep sets the threads per worker; OpenMPI's default binding to one core would
    // squeeze a worker's threads onto it.
    argv.insert(argv.end(), {"--bind-to", "none"});
  }
  if (asRoot) argv.push_back("--allow-run-as-root");
  if (o.nprocPerNode > cores) argv.push_back("--oversubscribe");
  argv.insert(argv.end(), o.mpirunArgs.begin(), o.mpirunArgs.end());
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

std::string resolveProgram(const std::string& program) {
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return runnable(program) ? program : "";
  auto path = Environment::fromProcess().get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (runnable(candidate)) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

BackendChoice chooseBackend(const std::string& requested, const BackendFacts& f) {
  if (!requested.empty() && requested != "auto") {
    // Not parseBackend: this flag also takes auto, which its error names.
    for (Backend b : {Backend::kGloo, Backend::kMpi, Backend::kNccl}) {
      if (requested == toString(b)) return {b, "--backend " + requested};
    }
    throw ConfigError(fmt::format("--backend {}: expected gloo, mpi, nccl or auto", requested));
  }
  const std::string how = requested.empty() ? "the default, auto: " : "--backend auto: ";
  if (!f.isLockstep) {
    return {Backend::kGloo, how + f.program + " does not link lockstep; it gets the lockstep and torchrun variables"};
  }
  if (f.elastic)
    return {Backend::kGloo, how + "an elastic job (--min-np) forms each generation's communicator over gloo"};
  if (f.gpus > 0 && f.gpus >= f.workers && (f.workers >= 2 || f.nnodes > 1 || f.hostsGiven)) {
    return {Backend::kNccl, how + fmt::format("every worker has a GPU of its own ({} visible on this node)", f.gpus)};
  }
  if (f.hostsGiven || f.nnodes > 1) return {Backend::kGloo, how + "workers on several nodes talk over TCP"};
  if (f.workers < 2) return {Backend::kGloo, how + "one worker has nothing to communicate"};
  if (f.workers > f.cores) {
    return {Backend::kGloo,
            how + fmt::format("{} workers on {} cores: MPI's busy waiting would take the cores from compute", f.workers,
                              f.cores)};
  }
  if (!f.mpiBuilt) return {Backend::kGloo, how + "this lockstep was built without MPI"};
  if (!f.mpirunFound) return {Backend::kGloo, how + "no mpirun on PATH (Debian package openmpi-bin)"};
  return {Backend::kMpi, how + "one node, OpenMPI's shared memory between the workers"};
}

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

int threadsPerWorker(const LaunchOptions& o, const std::map<std::string, std::string>& env) {
  if (o.threadsPerWorker) return *o.threadsPerWorker;
  for (const char* var : {env::kNumThreads, "OMP_NUM_THREADS"}) {
    auto it = env.find(var);
    if (it != env.end()) return std::max(1, std::atoi(it->second.c_str()));
  }
  return std::max(1, usableCores() / std::max(1, o.nprocPerNode));
}

std::vector<int> workerCpus(int localRank, int threads) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
    }
  }
  std::vector<int> cpus;
  for (int k = 0; k < threads && !allowed.empty(); ++k) {
    cpus.push_back(allowed[static_cast<size_t>(localRank * threads + k) % allowed.size()]);
  }
  return cpus;
}

bool isLockstepProgram(const std::string& path) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (path.empty()) return false;
  if (!ec && std::filesystem::equivalent(path, self, ec) && !ec) return true;
  // A program linked with liblockstep names it in its dynamic section; scan at most 256 MiB.
  std::ifstream in(path, std::ios::binary);
  const std::string needle = "liblockstep.so";
  std::string carry;
  std::vector<char> chunk(1 << 20);
  for (int i = 0; i < 256 && in; ++i) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    std::string window = carry + std::string(chunk.data(), static_cast<size_t>(in.gcount()));
    if (window.find(needle) != std::string::npos) return true;
    carry = window.substr(window.size() > needle.size() ? window.size() - needle.size() : 0);
  }
  return false;
}

int parseWorkerCount(const std::string& text, int visibleGpus) {
  if (text == "gpu") {
    if (visibleGpus > 0) return visibleGpus;
    throw ConfigError(fmt::format("-np gpu: no CUDA device is visible ({}); give the number of workers, e.g. -np 2",
                                  describeCudaVisibleDevices()));
  }
  size_t used = 0;
  int count = 0;
  try {
    count = std::stoi(text, &used);
  } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != text.size()) {
    throw ConfigError(fmt::format("-np '{}': expected a number of workers or gpu (one worker per visible GPU)", text));
  }
  return count;
}

namespace {

/// --backend: known, and able to serve these workers (a GPU each for nccl, mpirun for mpi).
void validateBackend(const LaunchOptions& o) {
  if (o.backend == Backend::kNccl && o.hosts.empty()) {
    const int gpus = visibleCudaDevices();
    if (o.nprocPerNode > gpus) {
      throw ConfigError(
          fmt::format("--backend nccl: {} worker(s) on this node, {} CUDA device(s) visible "
                      "({}); NCCL needs a GPU of its own for every worker: "
                      "use -np gpu, or --backend gloo",
                      o.nprocPerNode, gpus, describeCudaVisibleDevices()));
    }
  }
  if (o.backend == Backend::kMpi) {
    if (o.nnodes > 1) {
      throw ConfigError(
          "--backend mpi starts workers on this node only; for several nodes run mpirun yourself "
          "with a hostfile (see docs/launcher.md)");
    }
    if (resolveProgram("mpirun").empty()) {
      throw ConfigError(
          "--backend mpi needs `mpirun` on PATH (Debian package openmpi-bin; scripts/setup.sh installs it)");
    }
  }
}

}  // namespace

void validateLaunchOptions(const LaunchOptions& o) {
  if (o.nprocPerNode < 1)
    throw ConfigError(fmt::format("-np {}: the number of workers must be at least 1", o.nprocPerNode));
  if (o.nprocPerNode > kMaxWorkersPerNode) {
    throw ConfigError(
        fmt::format("-np {}: more than {} workers on one node; each worker is a process with its own "
                    "copy of the model",
                    o.nprocPerNode, kMaxWorkersPerNode));
  }
  if (o.nnodes < 1) throw ConfigError(fmt::format("--nnodes {}: must be at least 1", o.nnodes));
  if (o.nodeRank < 0 || o.nodeRank >= o.nnodes) {
    throw ConfigError(
        fmt::format("--node-rank {}: must be in 0..{} for --nnodes {}", o.nodeRank, o.nnodes - 1, o.nnodes));
  }
  if (o.masterPort < 0 || o.masterPort > 65535) {
    throw ConfigError(fmt::format("--master-port {}: must be in 1..65535", o.masterPort));
  }
  if (o.nnodes > 1 && o.masterPort == 0) {
    throw ConfigError("--master-port is required with --nnodes > 1 (every node must use the same port)");
  }
  if (o.masterAddr.empty()) throw ConfigError("--master-addr must not be empty");
  if (o.command.empty())
    throw ConfigError("missing the program to run: put it after `--`, e.g. `lockstep run -np 2 -- ./train`");
  if (resolveProgram(o.command[0]).empty()) {
    throw ConfigError(fmt::format("program '{}' not found or not executable{}", o.command[0],
                                  o.command[0].find('/') == std::string::npos ? " (searched PATH)" : ""));
  }
  if (o.threadsPerWorker && *o.threadsPerWorker < 1) {
    throw ConfigError(fmt::format("--threads {}: must be at least 1", *o.threadsPerWorker));
  }
  validateBackend(o);
  if (o.bindCores && o.hosts.empty()) {
    const int cores = usableCores();
    const int threads = threadsPerWorker(o, Environment::fromProcess().vars());
    if (o.nprocPerNode * threads > cores) {
      throw ConfigError(
          fmt::format("--bind core: {} worker(s) x {} thread(s) need {} cores, this node has {}; lower "
                      "-np or --threads, or leave --bind out",
                      o.nprocPerNode, threads, o.nprocPerNode * threads, cores));
    }
  }
  if (o.maxRestarts < 0) throw ConfigError(fmt::format("--max-restarts {}: must be 0 or more", o.maxRestarts));
  validateElastic(o);
  if (!o.hosts.empty()) {
    if (o.backend == Backend::kMpi) {
      throw ConfigError(
          "-H starts lockstep launchers over ssh with the gloo backend; for MPI across hosts run "
          "mpirun with -H or a hostfile yourself (see docs/multi-node.md)");
    }
    if (o.nnodes != 1 || o.nodeRank != 0) throw ConfigError("-H sets the nodes itself; leave out --nnodes/--node-rank");
    for (const auto& h : o.hosts) {
      if (h.slots != o.hosts.front().slots) {
        throw ConfigError(
            fmt::format("-H: every host needs the same number of slots (ranks are node * slots + "
                        "local rank); {} has {} but {} has {}",
                        o.hosts.front().host, o.hosts.front().slots, h.host, h.slots));
      }
    }
    if (o.rsh.empty() || resolveProgram(o.rsh.front()).empty()) {
      throw ConfigError(fmt::format("--rsh: '{}' not found; -H needs a remote shell (ssh) to start the other nodes",
                                    o.rsh.empty() ? "" : o.rsh.front()));
    }
  }
  if (o.commTimeoutSeconds && !(*o.commTimeoutSeconds > 0)) {
    throw ConfigError(fmt::format("--comm-timeout {}: must be a positive number of seconds", *o.commTimeoutSeconds));
  }
}

}  // namespace detail
}  // namespace lockstep

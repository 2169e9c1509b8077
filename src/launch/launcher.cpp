// launcher.cpp — launch(): the job token, the workers' environment, and
// --max-restarts around one run of the group. Which children a run starts is
// its LaunchMode's (launch_modes.h); watching them is the Supervisor's.
#include "lockstep/launch/launcher.h"

#include <unistd.h>

#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "launch/launch_commands.h"
#include "launch/launch_modes.h"
#include "launch/signal_pipe.h"
#include "launch/supervisor.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/common/comm_error.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/rendezvous/world.h"

namespace lockstep {
namespace {

using detail::pickFreePort;
using detail::portIsFree;
using detail::writeAll;  // errors writing our own stdout/stderr are ignored: nothing better to do

/// The mode `o` asks for: -H's hosts, mpirun for backend "mpi", else workers on this host.
std::unique_ptr<detail::LaunchMode> makeLaunchMode(const LaunchOptions& o) {
  if (!o.hosts.empty()) return std::make_unique<detail::RemoteHosts>(o);
  if (o.backend == Backend::kMpi) return std::make_unique<detail::MpirunJob>(o);
  return std::make_unique<detail::LocalWorkers>(o);
}

/// One run of the group: its children started, watched to the end, and summarized. With the
/// store this launcher serves, an elastic job's workers learn from it how many of them still run
/// (kRunningMembersKey, written as each exits or starts), so that the survivors of a loss need not
/// wait out the join window; up to `respawns` lost workers are replaced by newcomers.
LaunchResult runGroupOnce(const LaunchOptions& o, const std::map<std::string, std::string>& baseEnv,
                          Store* store = nullptr, int respawns = 0) {
  detail::SignalGuard signals;
  if (!o.backendReason.empty()) {
    writeAll(STDERR_FILENO, fmt::format("lockstep run: backend {} ({})\n", toString(o.backend), o.backendReason));
  }
  std::unique_ptr<detail::LaunchMode> mode = makeLaunchMode(o);
  detail::Supervisor::ExitFn onExit;
  if (store && o.minNp > 0) {
    onExit = [store](int running) {
      const std::string count = std::to_string(running);
      store->set(kRunningMembersKey, std::vector<uint8_t>(count.begin(), count.end()));
    };
  }
  if (onExit) onExit(o.nprocPerNode);  // before any worker looks
  detail::Supervisor::Slots slots;
  if (o.minNp > 0) {
    slots.start = [&](int rank) { return mode->newcomer(rank, baseEnv); };
    slots.respawns = respawns;
    if (store) {
      slots.leftTheJob = [store](int64_t pid) {
        return store->tryGet(kLeftMemberKeyPrefix + std::to_string(pid)).has_value();
      };
    }
    if (!o.hostDiscovery.empty()) {
      slots.discovery = std::make_unique<detail::HostDiscovery>(
          o.hostDiscovery, std::chrono::milliseconds(static_cast<int64_t>(o.discoveryInterval * 1000)), baseEnv);
    }
  }
  detail::Supervisor group(o, mode->start(baseEnv), std::move(onExit), std::move(slots));
  const detail::GroupEnd end = group.run(signals.readFd());
  LaunchResult result = mode->summarize(group.children(), end);
  result.respawns = group.respawned();
  return result;
}

/// The job token: from stdin (-H's remote launchers), the options, the
/// environment, or a fresh random one on a single node.
std::string jobToken(const LaunchOptions& o, const std::map<std::string, std::string>& env) {
  if (o.tokenFromStdin) {
    std::string line;
    char c;
    while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n') line += c;
    if (line.empty()) throw ConfigError("--token-stdin: no job token arrived on stdin");
    return line;
  }
  if (!o.token.empty()) return o.token;
  if (auto token = tokenFromEnvironment(Environment(env))) return *token;
  if (o.nnodes > 1) {
    throw ConfigError(
        fmt::format("--nnodes {}: every node must hold the same job token; put it in a file that "
                    "every node can read and pass --token-file FILE (or export {}), or start all "
                    "nodes from one host with -H",
                    o.nnodes, kJobTokenVar));
  }
  return randomToken();
}

/// An explicit --threads wins; else a count the user exported is kept and
/// followed by the variables they left unset; else cores / workers.
void setThreadVariables(const LaunchOptions& o, std::map<std::string, std::string>& env) {
  const std::string threadText = std::to_string(detail::threadsPerWorker(o, env));
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", env::kNumThreads}) {
    if (o.threadsPerWorker || !env.count(var)) env[var] = threadText;
  }
}

/// Node 0's launcher serves the job's store, so that it outlives every worker (mpirun's workers
/// keep theirs on rank 0: that launcher starts no worker itself).
bool servesStore(const LaunchOptions& o) { return o.nodeRank == 0 && o.backend != Backend::kMpi; }

/// The job's store, served at the master address (LOCKSTEP_STORE_BIND: where it listens) on
/// o.masterPort, or on a free port when `pickPort` (o.masterPort is set to it). A fresh store per
/// attempt: no key of an earlier attempt is there to be read by a later one.
Store serveStore(LaunchOptions& o, bool pickPort, const std::map<std::string, std::string>& env) {
  TcpStoreOptions so;
  so.host = o.masterAddr;
  so.isServer = true;
  so.token = o.token;
  if (auto bind = env.find(env::kStoreBind); bind != env.end()) so.bindAddr = bind->second;
  for (int tries = 1;; ++tries) {
    if (pickPort) o.masterPort = pickFreePort(o.masterAddr);
    so.port = o.masterPort;
    try {
      return Store::tcp(so);
    } catch (const CommError&) {
      if (!pickPort || tries == 3) throw;  // a picked port taken in the meantime: pick another
    }
  }
}

}  // namespace

LaunchResult launch(const LaunchOptions& input) {
  LaunchOptions o = input;
  if (!o.hosts.empty()) {
    o.nprocPerNode = o.hosts.front().slots;
    if (o.masterAddr.empty() || o.masterAddr == "127.0.0.1") o.masterAddr = o.hosts.front().host;
    if (o.masterPort == 0) o.masterPort = 29500;
  }
  detail::validateLaunchOptions(o);
  auto env = Environment::fromProcess().vars();
  o.token = jobToken(o, env);
  env.erase(kJobTokenFileVar);
  env[kJobTokenVar] = o.token;
  if (!o.iface.empty()) env[env::kIface] = o.iface;
  if (!o.hosts.empty()) return runGroupOnce(o, env);
  bool pickPort = o.masterPort == 0;
  setThreadVariables(o, env);
  if (o.bindCores) o.threadsPerWorker = detail::threadsPerWorker(o, env);  // the cores each worker is bound to
  if (o.commTimeoutSeconds) env[env::kCommTimeout] = fmt::format("{}", *o.commTimeoutSeconds);
  if (o.minNp > 0) {
    env[kMinMembersVar] = std::to_string(o.minNp);
    env[kMaxMembersVar] = std::to_string(o.maxNp > 0 ? o.maxNp : o.nprocPerNode);
    env[kStartMembersVar] = std::to_string(o.nprocPerNode);
  }
  int restarts = 0;  // of the group, and (elastic) of lost workers' slots
  for (int attempt = 0;; ++attempt, ++restarts) {
    if (o.nodeRank == 0 && attempt == 0 && !pickPort && !portIsFree(o.masterAddr, o.masterPort)) {
      throw ConfigError(
          fmt::format("--master-port {}: {}:{} is already in use; choose another port or leave "
                      "--master-port out to pick a free one",
                      o.masterPort, o.masterAddr, o.masterPort));
    }
    std::optional<Store> store;  // served for this attempt, until its workers ended
    if (servesStore(o)) {
      store = serveStore(o, pickPort, env);
      env[env::kAgentStore] = "1";
    } else if (o.nodeRank == 0 && pickPort) {
      o.masterPort = pickFreePort(o.masterAddr);  // mpirun's rank 0 serves it
    }
    env[env::kRestartCount] = env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    if (o.backend == Backend::kMpi) {
      // The workers learn rank and world from mpirun (OMPI_COMM_WORLD_*); the
      // store still meets at the master variables OpenMPI workers read.
      const WorldVariables& mpi = worldVariables(WorldSource::kOpenMpi);
      env[mpi.masterAddr] = o.masterAddr;
      env[mpi.masterPort] = std::to_string(o.masterPort);
    }
    env[env::kBackend] = toString(o.backend);  // the workers use the backend chosen here, not one of their own
    LaunchResult result = runGroupOnce(o, env, store ? &*store : nullptr, o.maxRestarts - restarts);
    result.restarts = attempt;
    restarts += result.respawns;
    bool workerFailed = result.exitCode != 0 && result.interruptSignal == 0;
    if (!workerFailed || restarts >= o.maxRestarts) {
      if (workerFailed && o.maxRestarts > 0) {
        result.summary += fmt::format("lockstep run: giving up: the group failed {} time(s) and --max-restarts is {}\n",
                                      attempt + 1, o.maxRestarts);
      }
      return result;
    }
    std::string failed = result.firstFailedRank >= 0 ? fmt::format("rank {}", result.firstFailedRank) : "a worker";
    writeAll(STDERR_FILENO, result.summary);
    writeAll(STDERR_FILENO,
             fmt::format("lockstep run: {} failed; restarting all {} worker(s) of node {} (restart {} of "
                         "{}); they resume from the last complete checkpoint\n",
                         failed, o.nprocPerNode, o.nodeRank, restarts + 1, o.maxRestarts));
  }
}

}  // namespace lockstep

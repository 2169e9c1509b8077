// local_workers.cpp — LocalWorkers: the workers of this node, fork/exec'ed here.
#include <unistd.h>

#include <fmt/format.h>

#include "launch/launch_commands.h"
#include "launch/launch_modes.h"
#include "launch/launch_summary.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/rendezvous/world.h"

namespace lockstep::detail {

std::map<std::string, std::string> LocalWorkers::workerEnvironment(int rank, int localRank) const {
  WorldInfo w;
  w.rank = rank;
  w.worldSize = o_.nprocPerNode * o_.nnodes;
  w.localRank = localRank;
  w.localWorldSize = o_.nprocPerNode;
  w.nodeRank = o_.nodeRank;
  w.masterAddr = o_.masterAddr;
  w.masterPort = o_.masterPort;
  auto env = environmentFor(w, WorldSource::kLockstep);
  env.merge(environmentFor(w, WorldSource::kTorchrun));
  return env;
}

/// Worker `local` of this node with `env` and its place's variables (and its cores with --bind core).
std::unique_ptr<Child> LocalWorkers::startWorker(int local, std::map<std::string, std::string> env) const {
  auto c = std::make_unique<Child>();
  c->rank = o_.nodeRank * o_.nprocPerNode + local;
  c->relay = makeRelay(o_, c->rank, OutputRelay::Source::kWorker);
  for (auto& [key, value] : workerEnvironment(c->rank, local)) env[key] = value;
  std::vector<int> cpus;
  if (o_.bindCores) cpus = workerCpus(local, *o_.threadsPerWorker);
  c->spawn(o_.command, env, /*pipeStdin=*/false, cpus);
  c->result.rank = c->rank;
  return c;
}

std::unique_ptr<Child> LocalWorkers::respawn(const Child& lost, const std::map<std::string, std::string>& baseEnv) {
  auto env = baseEnv;
  env[kNewcomerVar] = "1";
  return startWorker(lost.rank - o_.nodeRank * o_.nprocPerNode, std::move(env));
}

Children LocalWorkers::start(const std::map<std::string, std::string>& baseEnv) {
  Children children;
  for (int local = 0; local < o_.nprocPerNode; ++local) children.push_back(startWorker(local, baseEnv));
  std::string placement;
  for (auto& c : children)
    placement += fmt::format("{}rank {} pid {}", placement.empty() ? "" : ", ", c->rank, c->result.pid);
  writeAll(STDERR_FILENO,
           fmt::format("lockstep run: node {} of {} ({}): {}\n", o_.nodeRank, o_.nnodes, hostName(), placement));
  return children;
}

LaunchResult LocalWorkers::summarize(const Children& children, const GroupEnd& end) const {
  return groupSummary(
      children, end, [](int rank) { return fmt::format("rank {}", rank); }, "worker");
}

}  // namespace lockstep::detail

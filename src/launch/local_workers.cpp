// local_workers.cpp — LocalWorkers: the workers of this node, fork/exec'ed here.
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "launch/launch_commands.h"
#include "launch/launch_modes.h"
#include "launch/launch_summary.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/rendezvous/world.h"

namespace lockstep::detail {

std::map<std::string, std::string> LocalWorkers::workerEnvironment(int rank, int localRank, int worldSize) const {
  WorldInfo w;
  w.rank = rank;
  w.worldSize = worldSize > 0 ? worldSize : o_.nprocPerNode * o_.nnodes;
  w.localRank = localRank;
  w.localWorldSize = worldSize > 0 ? worldSize : o_.nprocPerNode;
  w.nodeRank = o_.nodeRank;
  w.masterAddr = o_.masterAddr;
  w.masterPort = o_.masterPort;
  auto env = environmentFor(w, WorldSource::kLockstep);
  env.merge(environmentFor(w, WorldSource::kTorchrun));
  return env;
}

/// Worker `local` of this node with `env` and its place's variables (and its cores with --bind core).
std::unique_ptr<Child> LocalWorkers::startWorker(int local, std::map<std::string, std::string> env,
                                                 int worldSize) const {
  auto c = std::make_unique<Child>();
  c->rank = o_.nodeRank * o_.nprocPerNode + local;
  c->relay = makeRelay(o_, c->rank, OutputRelay::Source::kWorker);
  for (auto& [key, value] : workerEnvironment(c->rank, local, worldSize)) env[key] = value;
  std::vector<int> cpus;
  if (o_.bindCores && local < o_.nprocPerNode) cpus = workerCpus(local, *o_.threadsPerWorker);
  c->spawn(o_.command, env, /*pipeStdin=*/false, cpus);
  c->result.rank = c->rank;
  return c;
}

/// A newcomer's world is the most workers the job may hold, so that every slot's rank is in it;
/// its global batch is planned for the job's start (kStartMembersVar).
std::unique_ptr<Child> LocalWorkers::newcomer(int rank, const std::map<std::string, std::string>& baseEnv) {
  auto env = baseEnv;
  env[kNewcomerVar] = "1";
  return startWorker(rank - o_.nodeRank * o_.nprocPerNode, std::move(env), std::max(o_.maxNp, o_.nprocPerNode));
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

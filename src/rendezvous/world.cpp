#include "lockstep/rendezvous/world.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "lockstep/common/error.h"

namespace lockstep {

const char* toString(WorldSource s) {
  switch (s) {
    case WorldSource::kSingle: return "single process";
    case WorldSource::kLockstep: return "lockstep run";
    case WorldSource::kTorchrun: return "torchrun";
    case WorldSource::kOpenMpi: return "OpenMPI";
    case WorldSource::kSlurm: return "Slurm";
  }
  return "?";
}

std::string WorldInfo::describe() const {
  return fmt::format("rank {} of {} (local {} of {}, node {}), master {}:{}, from {}", rank, worldSize, localRank,
                     localWorldSize, nodeRank, masterAddr, masterPort, toString(source));
}

namespace {

constexpr int64_t kMaxWorld = 1 << 20;

constexpr WorldVariables kLockstepVariables{env::kRank,     env::kWorldSize,  env::kLocalRank, env::kLocalWorldSize,
                                            env::kNodeRank, env::kMasterAddr, env::kMasterPort};
constexpr WorldVariables kTorchrunVariables{"RANK",       "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                            "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};
constexpr WorldVariables kOpenMpiVariables{"OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "OMPI_COMM_WORLD_NODE_RANK",
                                           "MASTER_ADDR",
                                           "MASTER_PORT"};
constexpr WorldVariables kSlurmVariables{
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODEID", "MASTER_ADDR",          "MASTER_PORT"};

struct WorldVarReader {
  const Environment& env;
  const char* source;

  std::optional<int> integer(const char* name, int64_t lo, int64_t hi) const {
    auto text = env.get(name);
    if (!text) return std::nullopt;
    return static_cast<int>(parseInt(*text, fmt::format("{} (from {})", name, source), lo, hi));
  }
  int required(const char* name, int64_t lo, int64_t hi, const char* hint) const {
    auto v = integer(name, lo, hi);
    if (!v) throw ConfigError(fmt::format("{} is set but {} is missing ({}); {}", firstVar, name, source, hint));
    return *v;
  }
  const char* firstVar = "";
};

void validate(const WorldInfo& w, const char* rankVar, const char* worldVar, const char* localRankVar,
              const char* localWorldVar) {
  if (w.rank >= w.worldSize) {
    throw ConfigError(fmt::format("{}={} must be smaller than {}={} ({})", rankVar, w.rank, worldVar, w.worldSize,
                                  toString(w.source)));
  }
  if (w.localRank >= w.localWorldSize) {
    throw ConfigError(fmt::format("{}={} must be smaller than {}={} ({})", localRankVar, w.localRank, localWorldVar,
                                  w.localWorldSize, toString(w.source)));
  }
  if (w.localWorldSize > w.worldSize) {
    throw ConfigError(fmt::format("{}={} cannot exceed {}={} ({})", localWorldVar, w.localWorldSize, worldVar,
                                  w.worldSize, toString(w.source)));
  }
}

/// Master address and port: the explicit variables, else `fallbackAddr`/`fallbackPort`
/// when the source can derive them, else an error when world > 1.
void readMaster(WorldInfo& w, const Environment& env, const char* addrVar, const char* portVar,
                std::optional<std::string> fallbackAddr, std::optional<int> fallbackPort, const std::string& hint) {
  if (auto addr = env.get(addrVar); addr && !addr->empty()) {
    w.masterAddr = *addr;
  } else if (fallbackAddr) {
    w.masterAddr = *fallbackAddr;
  } else if (w.worldSize > 1) {
    throw ConfigError(
        fmt::format("{} is not set; with world size {} ({}) the workers need the master's "
                    "address. {}",
                    addrVar, w.worldSize, toString(w.source), hint));
  }
  if (auto port = env.get(portVar)) {
    w.masterPort = static_cast<int>(parseInt(*port, fmt::format("{} ({})", portVar, toString(w.source)), 1, 65535));
  } else if (fallbackPort) {
    w.masterPort = *fallbackPort;
  } else if (w.worldSize > 1) {
    throw ConfigError(
        fmt::format("{} is not set; with world size {} ({}) the workers need the master's "
                    "port. {}",
                    portVar, w.worldSize, toString(w.source), hint));
  }
}

/// lockstep's and torchrun's variables: the same shape, different names.
WorldInfo fromLauncher(const Environment& env, WorldSource source, const char* hint, const char* masterHint) {
  const WorldVariables& v = worldVariables(source);
  WorldVarReader r{env, toString(source)};
  r.firstVar = v.rank;
  WorldInfo w;
  w.source = source;
  w.worldSize = r.required(v.world, 1, kMaxWorld, hint);
  w.rank = *r.integer(v.rank, 0, kMaxWorld);
  w.localRank = r.integer(v.localRank, 0, kMaxWorld).value_or(w.rank);
  w.localWorldSize = r.integer(v.localWorld, 1, kMaxWorld).value_or(w.worldSize);
  w.nodeRank = r.integer(v.nodeRank, 0, kMaxWorld).value_or(0);
  validate(w, v.rank, v.world, v.localRank, v.localWorld);
  readMaster(w, env, v.masterAddr, v.masterPort, std::nullopt, std::nullopt, masterHint);
  return w;
}

/// A port in 20000..39999 that every rank of one job derives alike.
int derivedPort(const std::string& jobKey) {
  return 20000 + static_cast<int>(std::hash<std::string>{}(jobKey) % 20000);
}

WorldInfo fromOpenMpi(const Environment& env) {
  const WorldVariables& v = kOpenMpiVariables;
  WorldVarReader r{env, "OpenMPI"};
  r.firstVar = v.rank;
  WorldInfo w;
  w.source = WorldSource::kOpenMpi;
  w.worldSize = r.required(v.world, 1, kMaxWorld, "mpirun sets both.");
  w.rank = *r.integer(v.rank, 0, kMaxWorld);
  w.localRank = r.integer(v.localRank, 0, kMaxWorld).value_or(w.rank);
  w.localWorldSize = r.integer(v.localWorld, 1, kMaxWorld).value_or(w.worldSize);
  w.nodeRank = r.integer(v.nodeRank, 0, kMaxWorld).value_or(0);
  validate(w, v.rank, v.world, v.localRank, v.localWorld);
  // On one node every rank can meet on loopback at a port derived from the job id.
  bool oneNode = w.localWorldSize == w.worldSize;
  std::optional<std::string> jobId = env.get("OMPI_MCA_ess_base_jobid");
  if (!jobId) jobId = env.get("OMPI_MCA_orte_ess_jobid");
  readMaster(w, env, v.masterAddr, v.masterPort, oneNode ? std::optional<std::string>("127.0.0.1") : std::nullopt,
             oneNode && jobId ? std::optional<int>(derivedPort("ompi:" + *jobId)) : std::nullopt,
             "Pass them to every rank, e.g. `mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500 ...`.");
  return w;
}

WorldInfo fromSlurm(const Environment& env) {
  WorldVarReader r{env, "Slurm"};
  r.firstVar = "SLURM_PROCID";
  WorldInfo w;
  w.source = WorldSource::kSlurm;
  // Inside `srun` the step's task count is the world; a batch script alone has only SLURM_NTASKS.
  const char* worldVar = env.has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  w.worldSize = r.required(worldVar, 1, kMaxWorld, "start the workers with `srun`.");
  w.rank = *r.integer("SLURM_PROCID", 0, kMaxWorld);
  w.localRank = r.integer("SLURM_LOCALID", 0, kMaxWorld).value_or(0);
  w.nodeRank = r.integer("SLURM_NODEID", 0, kMaxWorld).value_or(0);
  const char* localWorldVar = "SLURM_STEP_TASKS_PER_NODE";
  auto perNode = env.get(localWorldVar);
  if (!perNode) {
    localWorldVar = "SLURM_TASKS_PER_NODE";
    perNode = env.get(localWorldVar);
  }
  if (perNode) {
    w.localWorldSize = slurmTasksOnNode(*perNode, w.nodeRank);
  } else {
    int nodes =
        r.integer("SLURM_STEP_NUM_NODES", 1, kMaxWorld).value_or(r.integer("SLURM_NNODES", 1, kMaxWorld).value_or(1));
    w.localWorldSize = nodes == 1 ? w.worldSize : 1;
  }
  validate(w, "SLURM_PROCID", worldVar, "SLURM_LOCALID", localWorldVar);
  std::optional<std::string> host;
  if (auto list = env.get("SLURM_STEP_NODELIST"))
    host = firstSlurmHost(*list);
  else if (auto list2 = env.get("SLURM_JOB_NODELIST"))
    host = firstSlurmHost(*list2);
  else if (auto list3 = env.get("SLURM_NODELIST"))
    host = firstSlurmHost(*list3);
  std::optional<int> port;
  if (auto job = env.get("SLURM_JOB_ID")) {
    port = derivedPort("slurm:" + *job + ":" + env.get("SLURM_STEP_ID").value_or("0"));
  }
  readMaster(w, env, "MASTER_ADDR", "MASTER_PORT", host, port, "Export MASTER_ADDR and MASTER_PORT before `srun`.");
  return w;
}

}  // namespace

std::string firstSlurmHost(const std::string& list) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (list[end] == ',' && depth == 0) break;
  }
  std::string entry = list.substr(0, end);
  auto open = entry.find('[');
  if (open == std::string::npos) return entry;
  std::string prefix = entry.substr(0, open);
  std::string range = entry.substr(open + 1);
  size_t stop = range.find_first_of(",-]");
  return prefix + range.substr(0, stop);
}

int slurmTasksOnNode(const std::string& list, int nodeId) {
  // "2(x3),1": nodes 0-2 have 2 tasks, node 3 has 1.
  int node = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int count = 0;
    int repeat = 1;
    auto paren = item.find("(x");
    count =
        static_cast<int>(parseInt(item.substr(0, paren), "Slurm tasks-per-node entry '" + item + "'", 0, kMaxWorld));
    if (paren != std::string::npos) {
      auto close = item.find(')', paren);
      repeat = static_cast<int>(parseInt(item.substr(paren + 2, close - paren - 2),
                                         "Slurm tasks-per-node repeat in '" + item + "'", 1, kMaxWorld));
    }
    if (nodeId < node + repeat) return count;
    node += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  throw ConfigError(fmt::format("Slurm tasks-per-node list '{}' has no entry for node {}", list, nodeId));
}

WorldInfo detectWorld(const Environment& env) {
  if (env.has(kLockstepVariables.rank)) {
    return fromLauncher(env, WorldSource::kLockstep, "was the worker started by `lockstep run`?",
                        "`lockstep run` sets both; set them when starting workers by hand.");
  }
  if (env.has(kTorchrunVariables.rank)) {
    return fromLauncher(env, WorldSource::kTorchrun, "torchrun sets RANK and WORLD_SIZE together.",
                        "torchrun sets MASTER_ADDR and MASTER_PORT.");
  }
  if (env.has(kOpenMpiVariables.rank)) return fromOpenMpi(env);
  if (env.has(kSlurmVariables.rank)) return fromSlurm(env);
  return WorldInfo{};
}

const WorldVariables& worldVariables(WorldSource source) {
  switch (source) {
    case WorldSource::kLockstep: return kLockstepVariables;
    case WorldSource::kTorchrun: return kTorchrunVariables;
    case WorldSource::kOpenMpi: return kOpenMpiVariables;
    case WorldSource::kSlurm: return kSlurmVariables;
    case WorldSource::kSingle: break;
  }
  LOCKSTEP_ASSERT(false, "a single process has no world variables");
}

std::map<std::string, std::string> environmentFor(const WorldInfo& w, WorldSource form) {
  const WorldVariables& v = worldVariables(form);
  std::map<std::string, std::string> env{
      {v.rank, std::to_string(w.rank)},           {v.world, std::to_string(w.worldSize)},
      {v.localRank, std::to_string(w.localRank)}, {v.localWorld, std::to_string(w.localWorldSize)},
      {v.nodeRank, std::to_string(w.nodeRank)},   {v.masterAddr, w.masterAddr},
  };
  if (w.masterPort > 0) env[v.masterPort] = std::to_string(w.masterPort);
  if (form == WorldSource::kSlurm) {
    // A tasks-per-node list: this node's count, repeated over the nodes it fills evenly.
    const int nodes = std::max(1, w.worldSize / w.localWorldSize);
    env[v.localWorld] = nodes > 1 ? fmt::format("{}(x{})", w.localWorldSize, nodes) : std::to_string(w.localWorldSize);
  }
  return env;
}

}  // namespace lockstep

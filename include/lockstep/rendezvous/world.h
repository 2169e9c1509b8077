// lockstep/rendezvous/world.h — who am I: rank, world and master from the environment.
//
// detectWorld() reads, in this order, the first source whose rank variable is
// set (docs/environment.md lists every variable):
//   1. lockstep's launcher  LOCKSTEP_RANK, LOCKSTEP_WORLD_SIZE, LOCKSTEP_LOCAL_RANK, ...
//   2. torchrun             RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   3. OpenMPI (mpirun)     OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   4. Slurm (srun)         SLURM_PROCID, SLURM_STEP_NUM_TASKS|SLURM_NTASKS, SLURM_LOCALID, ...
// With none of them it is a single process of world 1. Inconsistent values
// (rank >= world, a missing port when world > 1, non-numbers) throw
// ConfigError naming the variable and the source. environmentFor() is the
// inverse, the one contract between a launcher and detectWorld().
#pragma once

#include <map>
#include <string>

#include "lockstep/common/env.h"

namespace lockstep {

enum class WorldSource { kSingle, kLockstep, kTorchrun, kOpenMpi, kSlurm };
const char* toString(WorldSource source);

struct WorldInfo {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;  ///< 0 only when worldSize == 1
  WorldSource source = WorldSource::kSingle;

  bool isMaster() const { return rank == 0; }
  std::string describe() const;
};

WorldInfo detectWorld(const Environment& env);

/// The variable names of one source (the launcher and detectWorld share them).
/// Slurm's localWorld is a tasks-per-node list ("2(x3)"), and its world
/// variable inside a step; OpenMPI and Slurm share torchrun's master variables.
struct WorldVariables {
  const char* rank;
  const char* world;
  const char* localRank;
  const char* localWorld;
  const char* nodeRank;
  const char* masterAddr;
  const char* masterPort;
};
/// Throws InternalError for kSingle, which has no variables.
const WorldVariables& worldVariables(WorldSource source);

/// The environment a launcher of the given kind gives a worker of `world`:
/// detectWorld() of exactly these variables returns `world` (source set to
/// `form`). The launcher writes its workers' variables through this, in the
/// lockstep and torchrun forms.
std::map<std::string, std::string> environmentFor(const WorldInfo& world, WorldSource form);

/// The first host of a Slurm host list: "node[03-05,7],gpu1" -> "node03".
std::string firstSlurmHost(const std::string& hostList);
/// Tasks on node `nodeId` from a Slurm tasks-per-node list: "2(x3),1", 3 -> 1.
int slurmTasksOnNode(const std::string& tasksPerNode, int nodeId);

}  // namespace lockstep

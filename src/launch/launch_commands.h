// launch_commands.h — the launcher's internals that are pure functions of
// the options (command lines it builds, checks it makes) and the port and
// program lookups, apart from launch() so tests reach them without processes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/shell_text.h"
#include "lockstep/launch/launcher.h"

namespace lockstep::detail {

/// Throws ConfigError naming the flag when `options` cannot be launched.
void validateLaunchOptions(const LaunchOptions& options);
/// --min-np/--max-np: within -np's bounds, one node, not MPI; ConfigError naming the flag.
void validateElastic(const LaunchOptions& options);

/// `-np TEXT`: a number of workers, or "gpu": one worker per visible GPU (`visibleGpus`, the
/// CUDA runtime's count with CUDA_VISIBLE_DEVICES applied). ConfigError naming -np otherwise,
/// and for gpu when no GPU is visible.
int parseWorkerCount(const std::string& text, int visibleGpus);

/// The shell command a -H launcher runs on host `nodeRank` through rsh (for logs and tests).
std::string remoteLaunchCommand(const LaunchOptions& options, int nodeRank, const std::string& selfPath,
                                const std::string& workingDir, const std::map<std::string, std::string>& forwardEnv);
// shellQuote (quoting `word` for a POSIX shell) is in common/shell_text.h.

/// The mpirun command line launch() uses for backend "mpi" (for logs and tests).
std::vector<std::string> mpirunCommand(const LaunchOptions& options, int usableCores, bool asRoot);

/// The backend `lockstep run` uses and why, in words for its first line.
struct BackendChoice {
  Backend backend = Backend::kGloo;
  std::string reason;
};
/// What the default backend depends on.
struct BackendFacts {
  std::string program;      ///< the program as given
  bool isLockstep = false;  ///< it is this lockstep binary or links liblockstep (isLockstepProgram)
  int workers = 1;          ///< on this node
  int cores = 1;            ///< usable on this node
  int nnodes = 1;
  bool hostsGiven = false;  ///< -H
  bool mpiBuilt = false;
  bool mpirunFound = false;
  int gpus = 0;          ///< CUDA devices visible on this node
  bool elastic = false;  ///< --min-np: each generation's communicator is a gloo one (membership.h)
};
/// `requested` is --backend as given ("" when left out, which means "auto"):
/// "gloo", "mpi" and "nccl" are taken as they are; "auto" picks gloo for an
/// elastic job of a lockstep worker (its generations re-form over gloo), nccl when the
/// program is a lockstep worker, every worker of the node has a GPU of its own
/// and there is more than one worker in all; else mpi when the program
/// is a lockstep worker (it finds its rank under mpirun; a Python or shell
/// program needs the torchrun/lockstep variables of a Gloo launch), there are
/// two workers or more (one has nothing to communicate) and no more than cores
/// (OpenMPI's waiting ranks poll: oversubscribed, they slow the others), all on one node (no
/// --nnodes > 1, no -H), lockstep was built with MPI and mpirun is on PATH
/// (OpenMPI moves tensors through shared memory there); else gloo. Anything
/// else is left for validateLaunchOptions to refuse.
BackendChoice chooseBackend(const std::string& requested, const BackendFacts& facts);
/// The cores this process may run on (its affinity mask).
int usableCores();
/// Threads per worker as the launcher sets them: --threads; else a count the user exported
/// (LOCKSTEP_NUM_THREADS, then OMP_NUM_THREADS, as read from `env`); else max(1, cores / workers).
int threadsPerWorker(const LaunchOptions& options, const std::map<std::string, std::string>& env);
/// --bind core: the CPUs of local rank `localRank` with `threads` threads each, from this
/// process's affinity mask (in order): entries localRank·threads .. +threads-1.
std::vector<int> workerCpus(int localRank, int threads);
/// Whether `path` is this process's own binary or an executable that links liblockstep.
bool isLockstepProgram(const std::string& path);

/// Finds `program` the way execvp would; empty when it cannot be run.
std::string resolveProgram(const std::string& program);
/// A TCP port on `host` that was free a moment ago, below the kernel's ephemeral range when one
/// there is free (no outgoing connection can take it before a worker listens on it).
int pickFreePort(const std::string& host);
/// Whether `host`:`port` can be bound now.
bool portIsFree(const std::string& host, int port);

}  // namespace lockstep::detail

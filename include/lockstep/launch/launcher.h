// lockstep/launch/launcher.h — `lockstep run`: start N workers and watch them.
//
// launch() starts nprocPerNode workers of `command` on this node, each in its
// own process group with the rendezvous variables of world.h set
// (LOCKSTEP_RANK, ..., and torchrun's RANK, WORLD_SIZE, ... for user code that
// reads those), and cores/N threads unless the user set OMP_NUM_THREADS etc.
// Every output line is prefixed "[rank] ". SIGINT/SIGTERM/SIGHUP are
// forwarded to every worker. When a worker fails (non-zero exit or signal),
// the others get SIGTERM, then SIGKILL after stopGrace; the result names the
// first failed rank, its exit code or signal and the tail of its stderr.
// Bad options throw ConfigError before anything starts.
//
// Node 0's launcher serves the job's store at the master address for the
// whole of each attempt (LOCKSTEP_AGENT_STORE=1 tells the workers), so the
// store outlives any worker; mpirun's workers keep theirs on rank 0.
//
// Every launch prints where the ranks went (node, host, ranks, pids). With
// maxRestarts, a failed group is stopped and started again (same ranks on this
// node), and the summary of each failure is printed before the restart. With
// hosts (-H), one launcher per host is started through rsh and the token
// travels on its stdin, never on a command line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/backend.h"

namespace lockstep {

/// One entry of `-H host1:2,host2:2`.
struct HostSlots {
  std::string host;
  int slots = 1;
};

/// Parses "-H" text: comma-separated host[:slots]; ConfigError naming the bad entry.
std::vector<HostSlots> parseHosts(const std::string& text);

struct LaunchOptions {
  int nprocPerNode = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;                ///< 0: pick a free port (single node only)
  std::vector<std::string> command;  ///< program and its arguments
  /// After the first failure or a forwarded signal, how long workers get to exit before SIGKILL.
  std::chrono::milliseconds stopGrace{std::chrono::seconds(5)};
  int tailLines = 20;  ///< stderr lines kept per rank for the summary
  bool prefixOutput = true;
  std::optional<int> threadsPerWorker;  ///< default: max(1, cores / nprocPerNode)
  /// --bind core: each worker (its threads, the communicator's and the loader's) runs on its own
  /// cores: local rank i on cores i·T .. i·T+T-1 of this node's usable ones (T threads per
  /// worker); needs workers × T <= cores. Default: none, the kernel places the threads.
  bool bindCores = false;
  std::optional<double> commTimeoutSeconds;  ///< exported as LOCKSTEP_COMM_TIMEOUT
  /// Exported as LOCKSTEP_BACKEND. kGloo and kNccl: the launcher starts every
  /// worker itself (kNccl: a GPU of its own for each worker of this node). kMpi:
  /// it starts them through `mpirun` (single node) and turns mpirun's tagged
  /// output back into "[rank] " lines. (--backend auto is resolved by the CLI
  /// before launch.)
  Backend backend = Backend::kGloo;
  /// Why this backend, in words: the launcher's first line says "lockstep run: backend B (WHY)".
  std::string backendReason;
  std::vector<std::string> mpirunArgs;  ///< extra arguments for mpirun (backend "mpi")
  /// The job token handed to the workers (LOCKSTEP_JOB_TOKEN). Empty: from
  /// LOCKSTEP_JOB_TOKEN / LOCKSTEP_JOB_TOKEN_FILE, else a random one — which
  /// only works when this launcher starts every node (single node, or -H);
  /// `--nnodes > 1` without -H needs the same token on every node.
  std::string token;
  /// Restart the whole group up to this many times after a worker fails (not
  /// after an interrupt); workers see LOCKSTEP_RESTART_COUNT. With minNp, each
  /// lost worker whose slot a newcomer takes counts as one restart too.
  int maxRestarts = 0;
  /// --min-np (elastic, one node): a worker lost while at least this many still run does not
  /// stop the job; the others go on and re-form through the store (rendezvous/membership.h,
  /// LOCKSTEP_MIN_NP). 0: not elastic, the first failure stops the group.
  int minNp = 0;
  /// --max-np: the most workers a generation of an elastic job holds (LOCKSTEP_MAX_NP); 0: -np.
  int maxNp = 0;
  /// --host-discovery: a shell command run every discoveryInterval seconds whose output
  /// ("HOST:SLOTS" lines) says how many workers the elastic job holds on this node, between
  /// minNp and maxNp: newcomers fill free slots, the newest workers leave (SIGTERM) when it shrinks.
  std::string hostDiscovery;
  double discoveryInterval = 2.0;
  /// -H: start one launcher per host through `rsh` (node rank = position);
  /// this process only watches them. Needs the same lockstep path and working
  /// directory on every host.
  std::vector<HostSlots> hosts;
  std::vector<std::string> rsh{"ssh", "-o", "BatchMode=yes"};
  std::string iface;  ///< exported as LOCKSTEP_IFACE (Gloo's interface)
  /// Read the token from stdin's first line and stop the workers when stdin
  /// closes (set on the launchers that -H starts: their parent went away).
  bool tokenFromStdin = false;
};

struct RankResult {
  int rank = -1;
  pid_t pid = -1;
  int exitCode = -1;  ///< when it exited normally
  int signal = 0;     ///< when a signal ended it
  bool stoppedByLauncher = false;
  double seconds = 0;  ///< run time
  std::vector<std::string> stderrTail;
  bool failed() const { return signal != 0 || exitCode != 0; }
};

struct LaunchResult {
  int exitCode = 0;          ///< what `lockstep run` exits with
  int firstFailedRank = -1;  ///< -1: none failed
  int interruptSignal = 0;   ///< a signal the launcher received and forwarded
  std::vector<RankResult> ranks;
  std::string summary;         ///< printed on stderr when something failed
  int restarts = 0;            ///< group restarts that happened (--max-restarts)
  std::vector<int> lostRanks;  ///< --min-np: ranks lost while the others went on, in the order lost
  int respawns = 0;            ///< --min-np: lost workers whose slots newcomers took (within --max-restarts)
};

/// Validates `options` (throws ConfigError), runs the workers to the end.
LaunchResult launch(const LaunchOptions& options);

}  // namespace lockstep

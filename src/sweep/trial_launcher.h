// trial_launcher.h — where a trial runs (docs/sweeps.md#slurm):
//   local       `lockstep run -np K --threads T -- lockstep train ...`, a child process of the sweep;
//   slurm       outside an allocation: one sbatch job per trial (a script in the trial's directory,
//               every task a worker started by srun); inside one (SLURM_JOB_ID set): one job step
//               per trial, `srun --exclusive -n K -c T lockstep train ...`.
// The sweep sees a TrialHandle: poll() until it ends, its exit code, terminate() to stop it.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace lockstep::sweep {

class TrialHandle {
 public:
  virtual ~TrialHandle() = default;
  /// Non-blocking; true once the trial has ended (then exitCode()).
  virtual bool poll() = 0;
  /// 0 on success; 128 + signal when a signal ended it.
  virtual int exitCode() const = 0;
  /// Asks the trial to stop (SIGTERM to its processes; scancel). Destroying a handle of a trial
  /// that still runs kills it.
  virtual void terminate() = 0;
  /// The Slurm job id of an sbatch trial; empty otherwise.
  virtual std::string job() const { return ""; }
};

struct TrialLaunch {
  std::vector<std::string> train;  ///< `lockstep train ...`: what each worker runs
  std::string dir;                 ///< the trial's run directory (exists)
  std::string name;                ///< e.g. fashion_mlp-trial-0003 (job names)
  int workers = 1;
  int threads = 1;
};

class TrialLauncher {
 public:
  virtual ~TrialLauncher() = default;
  /// Starts the trial; `command` receives what was run, for the trial's record. Output goes to
  /// DIR/output.log. Throws lockstep::Error when it cannot start.
  virtual std::unique_ptr<TrialHandle> start(const TrialLaunch& launch, std::string& command) = 0;
  /// "local", "slurm (sbatch)", "slurm (job steps in allocation 42)".
  virtual std::string describe() const = 0;
};

std::unique_ptr<TrialLauncher> makeLocalLauncher(const std::string& lockstepBin);
/// ConfigError when Slurm's commands are missing.
std::unique_ptr<TrialLauncher> makeSlurmLauncher();

}  // namespace lockstep::sweep

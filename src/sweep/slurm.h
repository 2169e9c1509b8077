// slurm.h — what lockstep asks of Slurm, through its own commands (sbatch,
// squeue, scontrol, sacct, scancel; no library): batch scripts for a training
// run, submitting them, where a job is, how it ended, cancelling it
// (docs/sweeps.md#slurm). The clients find the cluster as usual (slurm.conf,
// SLURM_CONF).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lockstep::sweep {

/// What an sbatch script asks for; 0 or empty: Slurm's default.
struct BatchOptions {
  std::string jobName;
  int nodes = 0;
  int ntasksPerNode = 0;
  int ntasks = 0;
  int cpusPerTask = 0;
  std::string time;       ///< --time, e.g. 01:30:00
  std::string partition;  ///< --partition
  std::string output;     ///< --output (appended to: --open-mode=append)
  std::string chdir;      ///< --chdir
};

/// An sbatch script that starts `command` once per task with `srun --kill-on-bad-exit=1`: every
/// task a worker (rank from SLURM_PROCID, the world from the step's task count), a fresh job token
/// shared by the job's tasks, LOCKSTEP_NUM_THREADS = cpus per task when given.
std::string batchScript(const BatchOptions& options, const std::vector<std::string>& command);

/// ConfigError naming the first of `commands` that is not on PATH (what to install, and where).
void requireSlurmCommands(const std::vector<std::string>& commands, const std::string& what);

/// Runs sbatch --parsable on `scriptPath`; the job id. Error with sbatch's message when it fails.
std::string submitBatch(const std::string& scriptPath);

/// Whether Slurm still has the job queued or running (squeue); nullopt when squeue itself failed.
std::optional<bool> jobActive(const std::string& jobId);

/// How a job that left the queue ended: its state (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...) and
/// exit code (128 + signal when a signal ended it), from scontrol, else sacct; nullopt when
/// Slurm no longer knows it.
struct JobEnd {
  std::string state;
  int exitCode = 0;
};
std::optional<JobEnd> jobEnd(const std::string& jobId);

/// scancel, optionally with a signal (--signal=KILL); errors are ignored (the job may be gone).
void cancelJob(const std::string& jobId, const std::string& signal = "");

/// Whether this process runs inside a Slurm allocation (SLURM_JOB_ID is set).
bool insideSlurmAllocation();

/// Runs argv (a program on PATH), returns {exit code, stdout and stderr}.
std::pair<int, std::string> runCapture(const std::vector<std::string>& argv);

}  // namespace lockstep::sweep

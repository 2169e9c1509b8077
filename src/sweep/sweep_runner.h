// sweep_runner.h — running a sweep's trials J at a time, here or through
// Slurm (docs/sweeps.md).
//
// Each trial is `lockstep train BASE overrides... params...
// monitor.dir=DIR/trial-NNNN ...` on K workers (trial_launcher.h), a normal
// run directory. After every start and end the runner rewrites trials.jsonl,
// trials.csv and best.yaml atomically, so a sweep killed at any moment
// leaves a consistent journal: with `resume`, finished and failed trials are
// kept, interrupted ones (running or stopped) run again from scratch with
// the same parameters, and new trials continue the sequence. SIGINT/SIGTERM
// stop every trial (SIGTERM to its process group, SIGKILL after a grace).
#pragma once

#include <cstdint>
#include <string>

#include "sweep/sweep_spec.h"

namespace lockstep::sweep {

struct SweepRunOptions {
  std::string dir;          ///< the sweep's directory (runs/<spec stem> by default)
  int64_t jobs = 1;         ///< trials at once
  bool resume = false;      ///< continue the sweep recorded in dir
  std::string lockstep;     ///< the lockstep binary the trials run
  int threadsPerTrial = 0;  ///< threads per worker; 0: cores / (jobs * workers_per_trial), at least 1
  double stopGraceSeconds = 10;
  std::string scheduler = "local";  ///< local or slurm (trial_launcher.h)
};

/// The default directory of a spec: runs/<spec file stem>.
std::string defaultSweepDir(const std::string& specPath);

/// Runs the sweep to its budget. Returns 0 when it ran to the end (failed trials included),
/// 128 + signal when a signal stopped it. Throws ConfigError for a directory that holds another
/// sweep (without resume) or a journal that does not fit the spec.
int runSweep(const SweepSpec& spec, const SweepRunOptions& options);

}  // namespace lockstep::sweep

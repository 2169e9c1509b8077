// trial_record.h — what a sweep knows of each trial, and the files it keeps
// them in (docs/sweeps.md#results):
//   trials.jsonl  one JSON object per trial, rewritten atomically whenever a
//                 trial starts or ends: the sweep's journal, what --resume reads;
//   trials.csv    the same as a table (one column per parameter);
//   best.yaml     the full `lockstep train` config of the best finished trial.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sweep/search_space.h"
#include "sweep/sweep_spec.h"

namespace lockstep::sweep {

/// kPaused: finished a rung of early_stop and waits for a promotion; kPruned: was never promoted
/// (the sweep ended with it paused). kStopped: a signal stopped the sweep while it ran.
enum class TrialStatus { kRunning, kDone, kFailed, kStopped, kPaused, kPruned };

const char* toString(TrialStatus status);

struct Trial {
  int64_t index = 0;
  Point point;
  TrialStatus status = TrialStatus::kRunning;
  double objective = 0;       ///< the spec's metric (as reported, not negated) at its last run's end
  std::vector<double> rungs;  ///< early_stop: the objective at each rung it finished (rung i: AshaOptions::rungs()[i])
  double validationLoss = -1, validationAccuracy = -1, trainLoss = -1;  ///< -1: not reported
  int64_t steps = 0;
  double epochs = -1;   ///< steps / steps per epoch (from the trial's run.json); -1: unknown
  double seconds = 0;   ///< wall time of the trial's command
  int exitCode = 0;     ///< 128 + signal when it was killed
  std::string error;    ///< kFailed: why, with the last lines of its output
  std::string command;  ///< the trial's command line, shell-quoted
  std::string job;      ///< its Slurm job id (--scheduler slurm, sbatch); empty otherwise

  std::string name() const;  ///< trial-0007: its run directory under the sweep's
  /// Whether objective holds a measured value (done, or paused/pruned at a rung).
  bool measured() const {
    return status == TrialStatus::kDone || status == TrialStatus::kPaused || status == TrialStatus::kPruned;
  }
};

/// Whether a measured trial `a` is better than `b`: further up the rungs (early_stop), then by the
/// spec's objective.
bool better(const SweepSpec& spec, const Trial& a, const Trial& b);

std::string trialsJsonl(const SweepSpec& spec, const std::vector<Trial>& trials);
std::string trialsCsv(const SweepSpec& spec, const std::vector<Trial>& trials);
/// Reads trials.jsonl back; ConfigError naming the file and line when it does not fit the spec.
std::vector<Trial> readTrialsJsonl(const SweepSpec& spec, const std::string& path);
/// best.yaml's text: a comment naming the trial, then its full config.
std::string bestYaml(const SweepSpec& spec, const Trial& best);

}  // namespace lockstep::sweep

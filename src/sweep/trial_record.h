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

enum class TrialStatus { kRunning, kDone, kFailed, kStopped };

const char* toString(TrialStatus status);

struct Trial {
  int64_t index = 0;
  Point point;
  TrialStatus status = TrialStatus::kRunning;
  double objective = 0;  ///< the spec's metric (as reported, not negated); meaningful when kDone
  double validationLoss = -1, validationAccuracy = -1, trainLoss = -1;  ///< -1: not reported
  int64_t steps = 0;
  double seconds = 0;   ///< wall time of the trial's command
  int exitCode = 0;     ///< 128 + signal when it was killed
  std::string error;    ///< kFailed: why, with the last lines of its output
  std::string command;  ///< the trial's command line, shell-quoted

  std::string name() const;  ///< trial-0007: its run directory under the sweep's
};

/// Whether a finished trial `a` is better than `b` under the spec's objective.
bool better(const SweepSpec& spec, const Trial& a, const Trial& b);

std::string trialsJsonl(const SweepSpec& spec, const std::vector<Trial>& trials);
std::string trialsCsv(const SweepSpec& spec, const std::vector<Trial>& trials);
/// Reads trials.jsonl back; ConfigError naming the file and line when it does not fit the spec.
std::vector<Trial> readTrialsJsonl(const SweepSpec& spec, const std::string& path);
/// best.yaml's text: a comment naming the trial, then its full config.
std::string bestYaml(const SweepSpec& spec, const Trial& best);

}  // namespace lockstep::sweep

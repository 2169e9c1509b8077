// sample_audit.h — `lockstep samples DIR`: reads the files trainer.sample_log wrote
// (train/sample_log.h) and says whether every sample of each epoch was trained exactly once in
// the steps the run kept, through lost workers, newcomers and restarts (docs/elastic.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::cli {

struct EpochAudit {
  int64_t epoch = 0;          ///< from 0
  int64_t steps = 0;          ///< steps of the epoch the run kept
  int64_t expectedSteps = 0;  ///< of the epoch, up to the run's last kept step
  int64_t trainedOnce = 0;    ///< distinct samples trained exactly once
  int64_t doubled = 0;        ///< distinct samples trained twice or more
  int64_t leftOut = 0;        ///< samples no step of the epoch takes: the last partial global batch
};

struct SampleAudit {
  int files = 0;
  int generations = 0;     ///< (attempt, generation) pairs that trained
  int64_t keptSteps = 0;   ///< steps whose update the run's final state holds
  int64_t lastStep = 0;    ///< the furthest of them
  int64_t totalSteps = 0;  ///< the run's planned steps
  int64_t stepsPerEpoch = 0;
  int64_t redoneSteps = 0;      ///< steps started in a generation that did not keep them, trained again
  int64_t rolledBackSteps = 0;  ///< of those, steps a member had completed (its update lost with it)
  std::vector<EpochAudit> epochs;
  std::vector<std::string> problems;  ///< each names the step, generation and rank
  bool ok() const { return problems.empty(); }
};

/// Reads DIR/samples-*.jsonl; ConfigError when there are none or a line is not what the writer
/// writes (naming the file and line). A last line cut short (a process killed while writing) is
/// skipped.
SampleAudit auditSampleLog(const std::string& dir);

/// The audit as lines of text for people.
std::string formatSampleAudit(const SampleAudit& audit);
/// The audit as one JSON object.
std::string sampleAuditJson(const SampleAudit& audit);

}  // namespace lockstep::cli

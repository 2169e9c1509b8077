// sample_log.h — trainer.sample_log: the ids of every micro-batch's samples as this process feeds
// them, each generation it trains in and each step it completes, one JSON line per write(2), so that
// a killed worker's lines outlive it. `lockstep samples DIR` audits a run's files (docs/elastic.md,
// "Every sample once"). Private to train/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::detail {

class SampleLog {
 public:
  /// What the audit checks the steps against.
  struct Run {
    int64_t samples = 0;      ///< the training set's
    int64_t globalBatch = 0;  ///< samples per optimizer step over all ranks
    int64_t stepsPerEpoch = 0;
    int64_t totalSteps = 0;
    int64_t accumulation = 1;  ///< micro-batches per step
  };
  /// Creates `dir` and opens DIR/samples-HOST-PID.jsonl for appending, writes the run line;
  /// ConfigError naming trainer.sample_log and the path when it cannot. `attempt`: the job's
  /// restart count (a restart resumes from a checkpoint, and its steps replace the earlier ones').
  SampleLog(const std::string& dir, const Run& run, int64_t attempt);
  ~SampleLog();
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  /// From here this process is rank `rank` of `world` (data-parallel ranks) in generation
  /// `number`, which goes on from step `fromStep`.
  void generation(int64_t number, int rank, int world, int64_t fromStep);
  /// The samples of micro-batch `micro` of step `step` (counted from 1), about to be trained.
  void micro(int64_t epoch, int64_t step, int64_t micro, const std::vector<int64_t>& ids);
  /// Step `step`'s update is applied on this rank.
  void stepDone(int64_t step);

  const std::string& path() const { return path_; }

 private:
  void write(const std::string& line);
  std::string where() const;

  std::string path_;
  int fd_ = -1;
  const int64_t attempt_;
  int64_t generation_ = 0;
  int rank_ = -1;
};

}  // namespace lockstep::detail

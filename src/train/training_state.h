// training_state.h — where a run stands, as a checkpoint stores it, and
// resuming from one (choose the file, restore model, optimizer and RNG).
//
// Besides the model and optimizer entries (checkpoint.h, optimizer.h) a
// Trainer checkpoint holds:
//   meta/step, meta/epoch, meta/batch_in_epoch, meta/world_size, meta/batch_size
//   meta/rng                  the default CPU generator's state
//   metrics/last_train_loss, metrics/last_validation_loss, metrics/last_validation_accuracy
//                             the last regular log line's loss and end-of-epoch validation (-1: none yet)
//   metrics/window_steps, metrics/window_loss
//                             the steps since the last regular log line and each rank's loss summed over
//                             them, so a resumed run's log lines (and checkpoints) are the uninterrupted run's
//   metrics/final_train_loss, metrics/final_validation_loss, metrics/final_validation_accuracy
//                             only in the checkpoint of a run's last step: what it reported at its end, which
//                             a run resumed from it with nothing left to do reports again
// "Regular" leaves out what only the end of a run reports (a log line or a validation cut short by
// max_steps), so a checkpoint does not depend on where an earlier segment of the run stopped.
//   extra/<key>               CheckpointOptions::extras
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// A run's position: optimizer steps taken, and micro-batches consumed of the current epoch.
struct Position {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batchInEpoch = 0;
};

/// What a run reported and its unfinished log window (the metrics/ entries).
struct RunMetrics {
  struct Reported {
    double trainLoss = 0;
    double validationLoss = -1;
    double validationAccuracy = -1;
  };
  Reported regular;
  std::optional<Reported> final;
  int64_t windowSteps = 0;
  std::vector<double> windowLoss;  ///< per rank; empty when the checkpoint has none (an older file)
};

/// Precision fp16: the loss scaler's scale and growth tracker, so that a resumed run scales as the
/// uninterrupted one would.
inline constexpr const char* kLossScaleKey = "meta/loss_scale";
inline constexpr const char* kLossScaleGrowthKey = "meta/loss_scale_growth";

/// The meta/ and extra/ entries; throws CheckpointError for missing or negative counts.
CheckpointInfo readCheckpointMeta(const TensorArchive& archive);

/// Writes the meta/ and extra/ entries and the RNG state of this process.
void putTrainingMeta(TensorArchive& archive, const Position& at, int64_t worldSize, const TrainerOptions& options,
                     const RunMetrics& metrics);

/// Resumes per options.checkpoint.resume (auto: the newest checkpoint in
/// `dir` that reads back whole, chosen by rank 0 and broadcast; none; or a
/// path): restores the model and optimizer through `load` and the RNG,
/// and returns where to continue, re-dividing the epoch's position when the
/// world size or batch changed. Returns a zero Position when nothing is
/// resumed. Collective (the broadcast of the choice). Throws CheckpointError,
/// ObsoleteCheckpointError when rank 0 met a checkpoint of an older format.
/// `metrics` receives the checkpoint's (left as is when nothing is resumed).
/// `dataWorld`: the data-parallel replicas sharing the data (workers / pipeline stages),
/// what meta/world_size records.
/// `load` restores the model and optimizer from the checkpoint (a Strategy's loadState; `report`: log
/// what differs).
using StateLoader = std::function<void(const TensorArchive& archive, bool report)>;
Position resumeTraining(const TrainerOptions& options, CheckpointDir* dir, Communicator& comm, const StateLoader& load,
                        RunMetrics& metrics, int64_t dataWorld);

}  // namespace lockstep::detail

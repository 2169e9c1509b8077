// training_state.h — where a run stands, as a checkpoint stores it, and
// resuming from one (choose the file, restore model, optimizer and RNG).
//
// Besides the model and optimizer entries (checkpoint.h, optimizer.h) a
// Trainer checkpoint holds:
//   meta/step, meta/epoch, meta/batch_in_epoch, meta/world_size, meta/batch_size
//   meta/rng                  the default CPU generator's state
//   extra/<key>               CheckpointOptions::extras
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"

namespace lockstep {

class Strategy;

namespace detail {

/// A run's position: optimizer steps taken, and micro-batches consumed of the current epoch.
struct Position {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batchInEpoch = 0;
};

/// The meta/ and extra/ entries; throws CheckpointError for missing or negative counts.
CheckpointInfo readCheckpointMeta(const TensorArchive& archive);

/// Writes the meta/ and extra/ entries and the RNG state of this process.
void putTrainingMeta(TensorArchive& archive, const Position& at, int64_t worldSize, const TrainerOptions& options);

/// Resumes per options.checkpoint.resume (auto: the newest checkpoint in
/// `dir` that reads back whole, chosen by rank 0 and broadcast; none; or a
/// path): restores the model and optimizer through `strategy` and the RNG,
/// and returns where to continue, re-dividing the epoch's position when the
/// world size or batch changed. Returns a zero Position when nothing is
/// resumed. Collective (the broadcast of the choice). Throws CheckpointError,
/// ObsoleteCheckpointError when rank 0 met a checkpoint of an older format.
Position resumeTraining(const TrainerOptions& options, CheckpointDir* dir, Communicator& comm, Strategy& strategy);

}  // namespace detail
}  // namespace lockstep

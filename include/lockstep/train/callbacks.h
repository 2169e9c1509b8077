// lockstep/train/callbacks.h — what the Trainer tells observers while it runs.
//
// The Trainer calls every TrainerCallback in TrainerOptions::callbacks, on
// every rank, from the training thread. Callbacks must be quick (they run
// inside the step loop): write to a buffer or a file, never call collectives.
// The monitor layer (metrics files, timeline, progress bar) is built on this;
// the Trainer itself knows nothing of files or terminals.
//
// Times are microseconds since FitInfo::origin (a steady clock read at the
// start of fit()), so the phases of different steps and buckets line up on
// one axis; FitInfo::unixTimeAtOrigin maps them to wall-clock time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

/// The parts of one optimizer step, in the order they happen.
enum class Phase {
  kDataWait,   ///< waiting for the loader's next batch
  kForward,    ///< model forward and loss
  kBackward,   ///< backward; gradient buckets are launched from inside it
  kCommWait,   ///< waiting for gradient communication after backward (exposed communication)
  kOptimizer,  ///< clipping and the optimizer step
};
constexpr int kPhaseCount = 5;
const char* toString(Phase phase);

struct PhaseSpan {
  Phase phase = Phase::kForward;
  double startUs = 0;
  double durationUs = 0;
  int micro = -1;  ///< pipeline stages: the micro-batch a forward, backward or its receive wait belongs to
};

/// One gradient bucket's allreduce in one step.
struct BucketSpan {
  int bucket = 0;  ///< bucket index in launch order
  int64_t bytes = 0;
  double launchUs = 0;  ///< when the bucket was handed to the communicator
  double doneUs = 0;    ///< when the backend completed it (Work::completedAt())
};

struct FitInfo {
  int rank = 0;
  int worldSize = 1;
  int64_t totalSteps = 0;  ///< optimizer steps the run will end at
  int64_t startStep = 0;   ///< > 0 when resumed from a checkpoint
  int64_t stepsPerEpoch = 0;
  int64_t epochs = 0;
  int64_t globalBatch = 0;  ///< samples per optimizer step over all ranks
  std::chrono::steady_clock::time_point origin;
  double unixTimeAtOrigin = 0;  ///< seconds since the epoch when origin was read
};

/// One optimizer step on this rank. Micro-batches of an accumulating step
/// contribute one span per phase each.
struct StepRecord {
  int64_t step = 0;   ///< 1-based optimizer step that just finished
  int64_t epoch = 0;  ///< 0-based
  double startUs = 0;
  double durationUs = 0;
  double loss = 0;  ///< this rank's loss of the step (not averaged over ranks)
  double lr = 0;
  std::vector<PhaseSpan> phases;
  std::vector<BucketSpan> buckets;
  /// On a GPU, the most bytes of tensors the CUDA caching allocator held during the step; -1 on the CPU.
  int64_t devicePeakBytes = -1;
};

/// Every logEvery steps, on every rank, with values averaged over ranks.
struct LogRecord {
  int64_t step = 0;
  int64_t totalSteps = 0;
  int64_t epoch = 0;
  double loss = 0;  ///< mean over ranks and the window's steps
  double lr = 0;
  double samplesPerSecond = 0;  ///< global, over the window
  double stepSeconds = 0;       ///< mean wall time of the window's steps
  double timeUs = 0;
};

struct ValidationRecord {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double accuracy = -1;  ///< -1 when the task has none
  double timeUs = 0;
};

/// An elastic run (elastic.h) went on in a new generation of workers after a loss.
struct GenerationRecord {
  int64_t generation = 0;     ///< its number (rendezvous/membership.h)
  int64_t step = 0;           ///< the completed step it took up; training goes on with the next
  int worldSize = 0;          ///< workers in it
  int previousWorldSize = 0;  ///< workers in the one before
  int rank = 0;               ///< this worker's rank in it
  double seconds = 0;         ///< from the failed collective to the new generation's strategy
  double timeUs = 0;          ///< when it was ready
};

struct FitResult;

class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  virtual void onFitStart(const FitInfo& /*info*/) {}
  virtual void onStepEnd(const StepRecord& /*record*/) {}
  virtual void onLog(const LogRecord& /*record*/) {}
  virtual void onValidation(const ValidationRecord& /*record*/) {}
  /// Elastic runs: after a new generation took up the training, before its first step.
  virtual void onGeneration(const GenerationRecord& /*record*/) {}
  virtual void onFitEnd(const FitResult& /*result*/) {}
};

}  // namespace lockstep

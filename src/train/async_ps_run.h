// async_ps_run.h — one Trainer::fit() call with schedule async_ps (ps/parameter_server.h): the last
// ps.servers ranks serve the weights, the others train at their own pace. Private to train/.
//
// Work is handed out by the servers' tickets: update t is the run's batches k = tA .. tA+A-1 (A the
// accumulation), batch k being batch k % B of epoch k / B of the whole training set (shuffled with
// the seed and the epoch, B batches per epoch), trained by whichever worker received ticket t.
// Every batch is trained once, by one worker, and fast workers train more of them. With s = 0 a round of W updates
// covers the same samples as one synchronous step of W workers. There is no collective between workers until the end:
// each worker logs its own loss; the servers count staleness; validation and the result are gathered at the end.
//
// Checkpoints: every checkpoint.every x W updates (0: at the end of every epoch of the whole set) and
// at the end, the servers stop in a consistent state (ps/parameter_server.h, "Checkpoints") and
// server 0 writes one checkpoint in the Trainer's format (async_ps_checkpoint.h); a run resumes from
// its own or any Trainer checkpoint, its first ticket the checkpoint's position in samples.
#pragma once

#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <optional>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/data/sampler.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "train/fit_events.h"
#include "train/step_timer.h"

namespace lockstep::detail {

class AsyncPsRun {
 public:
  /// `model` must outlive the run.
  AsyncPsRun(std::shared_ptr<Communicator> comm, const TrainerOptions& options, const LayeredModel& model,
             const FaultInjection& faults, const Dataset& train, const Dataset* validation);
  FitResult run();

 private:
  using Clock = std::chrono::steady_clock;
  void checkOptions() const;
  void checkOptimizer() const;
  void resume();
  PsOptions psOptions() const;
  double learningRateOf(int64_t update, double base) const;
  int64_t updatesPerEpoch() const;
  int64_t epochOf(int64_t ticket) const;
  void announce();
  void serve();
  void work();
  double trainBatch(int64_t ticket);
  double nonFiniteLoss(int64_t ticket, int64_t k, double loss) const;
  std::vector<at::Tensor> checkpointedBuffers() const;
  void logWindow(int64_t ticket, double lr);
  void validate();
  void gather();
  void finish();

  std::shared_ptr<Communicator> comm_;
  const TrainerOptions& o_;
  const FaultInjection& faults_;
  const FitEvents events_;                    // before timer_, which takes its origin
  const LayeredModel& chain_;                 // what the workers run
  std::shared_ptr<torch::nn::Module> model_;  // chain_.model
  const Dataset& train_;
  const Dataset* validation_;
  const int rank_;
  const PsRole role_;

  DistributedSampler sampler_;  // the whole training set: batch t % B of epoch t / B
  int64_t samplerEpoch_ = -1;
  int64_t batchesPerEpoch_ = 0;                     // B: the sampler's batches of trainer.batch_size per epoch
  int64_t totalUpdates_ = 0;                        // pushes of the run: each of trainer.accumulation batches
  int64_t updateBatch_ = 0;                         // samples per update
  std::unique_ptr<torch::optim::Optimizer> whole_;  // the run's optimizer over the model (a server's template)
  double baseRate_ = 0;                             // its first group's rate
  double lr_ = 0;  // that group's rate on the servers after warmup: for one worker's batch
  LrScalingOptions scaling_;

  std::unique_ptr<CheckpointDir> checkpoints_;
  int64_t firstUpdate_ = 0;                        // updates done before: a resumed run's first ticket
  std::optional<TensorArchive> resumedOptimizer_;  // a server's: the checkpoint's optimizer entries

  detail::StepTimer timer_;
  FitResult result_;
  PsStats stats_;               // server 0's
  double waitSeconds_ = 0;      // this worker's, for the servers
  int64_t skippedUpdates_ = 0;  // this worker's, for trainer.nan_policy skip
  double windowLoss_ = 0;
  int64_t windowSteps_ = 0;
  Clock::time_point windowStart_;
  Clock::time_point trainStart_, trainEnd_;
};

}  // namespace lockstep::detail

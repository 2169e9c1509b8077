// gradient_reducer.h — the one gradient-bucket engine of the ddp layer.
//
// DistributedDataParallel (allreduce), ShardedDataParallel (ZeRO-2:
// reduce-scatter into this rank's part) and FullyShardedDataParallel (ZeRO-3:
// reduce-scatter, then the unit's memory freed) are fronts over a
// GradientReducer. The reducer owns what a synchronised backward has in
// common: the autograd hooks, which gradient arrived, when a bucket is
// complete, launching buckets strictly in one order (the same on every rank),
// the parameters that got no gradient (an error naming them, or the used map
// agreed over ranks so that a parameter no rank used keeps its gradient as it
// was), waiting, per-bucket timings, statistics and noSync(). What a bucket *is*
// (a flat buffer, lent gradients, a unit's gathered memory) and which
// collective runs on it is the front's, through BucketCollective.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/distributed_data_parallel.h"

namespace torch::nn {
class Module;
}

namespace lockstep::detail {

/// What a front does with its buckets; the GradientReducer decides when.
class BucketCollective {
 public:
  virtual ~BucketCollective() = default;
  /// The first gradient of a synchronised backward arrives: what the last step's update used may go.
  virtual void startStep() {}
  /// Parameter `param`'s gradient for this step is in its .grad (undefined for an unused
  /// parameter in finish): take it into slot `slot` of bucket `bucket`.
  virtual void stage(size_t param, size_t bucket, size_t slot) = 0;
  /// Parameter `param` got no gradient on this rank in this step (findUnusedParameters): its slot
  /// takes what its .grad holds (zeros when it has none), but .grad itself is left as it is until
  /// settleUnused says whether any rank used it. Default: stage().
  virtual void stageUnused(size_t param, size_t bucket, size_t slot) { stage(param, bucket, slot); }
  /// In finish, after every bucket landed, for each parameter given to stageUnused: with
  /// `usedByAnyRank` its slot's average is its gradient (the others' gradients averaged with this
  /// rank's zeros); without, no rank used it and its gradient stays as it was before the step.
  virtual void settleUnused(size_t /*param*/, bool /*usedByAnyRank*/) {}
  /// Every gradient of `bucket` was staged; it is launched next (when its turn comes).
  virtual void seal(size_t /*bucket*/) {}
  /// Starts `bucket`'s collective; null when nothing needs communicating. May add to stats.bytesSent.
  virtual WorkHandle launch(size_t bucket, SyncStats& stats) = 0;
  /// In finish, in launch order: `bucket`'s collective has completed; put its result in place.
  virtual void land(size_t /*bucket*/, SyncStats& /*stats*/) {}
  /// The step is over or abandoned: drop what `bucket` holds for it.
  virtual void endStep(size_t /*bucket*/) {}
  /// float32 gradient bytes `bucket` averages (statistics, timings).
  virtual int64_t bucketBytes(size_t bucket) const = 0;
};

struct ReducerPlan {
  std::vector<std::string> names;                   ///< parameter names, for errors
  std::vector<std::vector<size_t>> buckets;         ///< parameter indices of each bucket, slot order
  std::vector<size_t> order;                        ///< bucket indices in launch order
  bool findUnusedParameters = false;                ///< unused parameters are allowed; the used map is agreed each step
  bool communicates = true;                         ///< false: a world of one with nothing to stage or launch
  torch::nn::Module* broadcastBuffersOf = nullptr;  ///< re-broadcast rank 0's buffers after each sync
  c10::Device device{c10::kCPU};                    ///< the parameters' device: where the used map is reduced
};

/// Buckets launched in index order, or the last first (`reversed`: ZeRO-3's units, in backward
/// order), with `options`' unused-parameter rule and `module`'s buffers re-broadcast if asked.
ReducerPlan makeReducerPlan(std::vector<std::string> names, std::vector<std::vector<size_t>> buckets, bool reversed,
                            const SyncOptions& options, torch::nn::Module& module);

class GradientReducer {
 public:
  GradientReducer(ReducerPlan plan, BucketCollective& collective, Communicator& comm);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Calls `onAccumulated(i)` after autograd has accumulated parameter i's gradient into .grad
  /// (the callback checks its owner is alive); the hooks go with unhook() or the reducer.
  void hook(const std::vector<at::Tensor>& params, std::function<void(size_t)> onAccumulated);
  void unhook();

  /// Autograd accumulated `param`'s gradient: it counts as used in this step (noSync micro-batches
  /// included). In a synchronised backward its gradient is final: stage it, launch what is complete.
  void onGradient(size_t param);
  /// Stages the parameters without a gradient (or throws naming them), launches the rest, agrees
  /// the used map (findUnusedParameters: one allreduce of a float per parameter, after the
  /// buckets), waits for every bucket in launch order and lands it, settles the parameters this
  /// rank did not use, re-broadcasts the buffers. Nothing while sync is disabled.
  void finish();

  /// The bucket's collective was launched this step and has completed (polled now).
  bool collectiveDone(size_t bucket);
  /// (bucket, slot) of parameter `param`.
  std::pair<size_t, size_t> slotOf(size_t param) const { return slotOf_[param]; }

  void setSyncEnabled(bool enabled) { syncEnabled_ = enabled; }
  bool syncEnabled() const { return syncEnabled_; }
  const SyncStats& stats() const { return stats_; }
  const std::vector<BucketTiming>& lastTimings() const { return lastTimings_; }

 private:
  struct Bucket {
    int pending = 0;
    bool ready = false;
    WorkHandle work;
    std::chrono::steady_clock::time_point launched;
  };

  void arrive(size_t param, bool duringBackward, bool usedHere = true);
  void launchReady(bool duringBackward);
  /// Waits for every bucket in launch order and lands it, recording its timing.
  void waitAndLand();
  /// Starts the allreduce of which parameters each rank used this step (1 used, 0 not).
  WorkHandle launchUsedMap(at::Tensor& usedMap) const;
  void reset();

  ReducerPlan plan_;
  BucketCollective& collective_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> slotOf_;
  std::vector<bool> arrived_;
  std::vector<bool> usedLocally_;  ///< autograd accumulated a gradient since the last finish (noSync too)
  size_t nextToLaunch_ = 0;
  bool anyArrived_ = false;
  bool syncEnabled_ = true;
  SyncStats stats_;
  std::vector<BucketTiming> lastTimings_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace lockstep::detail

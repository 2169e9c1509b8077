// gradient_reducer.cpp — src/ddp/gradient_reducer.h.
#include "ddp/gradient_reducer.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

/// The error for the parameters that got no gradient in a synchronised step; empty when every one arrived.
std::string missingGradientsError(const std::vector<std::string>& names, const std::vector<bool>& arrived, int rank,
                                  bool anyArrived) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!arrived[i]) missing.push_back(names[i]);
  }
  if (missing.empty()) return {};
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + missing[i];
  if (missing.size() > 8) list += fmt::format(" and {} more", missing.size() - 8);
  return fmt::format("{} parameter(s) received no gradient in this step on rank {}: {}. {}", missing.size(), rank, list,
                     anyArrived ? "If some parameters are legitimately unused, set SyncOptions::findUnusedParameters "
                                  "(ddp.find_unused_parameters in configs)."
                                : "Call finishGradientSync() once after each backward.");
}

std::string arrivedTwiceError(const std::string& name) {
  return fmt::format(
      "the gradient of '{}' arrived twice without finishGradientSync() in between; call finishGradientSync() after "
      "every synchronised backward, or use noSync() to accumulate",
      name);
}

}  // namespace

ReducerPlan makeReducerPlan(std::vector<std::string> names, std::vector<std::vector<size_t>> buckets, bool reversed,
                            const SyncOptions& options, torch::nn::Module& module) {
  ReducerPlan plan;
  plan.names = std::move(names);
  plan.buckets = std::move(buckets);
  plan.order.resize(plan.buckets.size());
  std::iota(plan.order.begin(), plan.order.end(), size_t{0});
  if (reversed) std::reverse(plan.order.begin(), plan.order.end());
  plan.findUnusedParameters = options.findUnusedParameters;
  plan.broadcastBuffersOf = options.broadcastBuffers ? &module : nullptr;
  return plan;
}

GradientReducer::GradientReducer(ReducerPlan plan, BucketCollective& collective, Communicator& comm)
    : plan_(std::move(plan)), collective_(collective), comm_(comm) {
  slotOf_.resize(plan_.names.size());
  buckets_.resize(plan_.buckets.size());
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    for (size_t slot = 0; slot < plan_.buckets[b].size(); ++slot) slotOf_[plan_.buckets[b][slot]] = {b, slot};
  }
  LOCKSTEP_ASSERT(plan_.order.size() == buckets_.size(), "the launch order must name every bucket once");
  arrived_.assign(plan_.names.size(), false);
  usedLocally_.assign(plan_.names.size(), false);
  reset();
}

GradientReducer::~GradientReducer() { unhook(); }

void GradientReducer::hook(const std::vector<at::Tensor>& params, std::function<void(size_t)> onAccumulated) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    LOCKSTEP_ASSERT(accumulator != nullptr, "no gradient accumulator for '", plan_.names[i], "'");
    // A post-hook on the AccumulateGrad node runs once autograd has accumulated the step's
    // gradient into .grad (in place when .grad is already a bucket's view).
    auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [onAccumulated, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          onAccumulated(i);
          return outputs;
        }));
    hooks_.emplace_back(std::move(accumulator), key);
  }
}

void GradientReducer::unhook() {
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
  hooks_.clear();
}

void GradientReducer::onGradient(size_t param) {
  usedLocally_[param] = true;
  if (!syncEnabled_) return;
  if (arrived_[param]) throw Error(arrivedTwiceError(plan_.names[param]));
  if (!anyArrived_) collective_.startStep();
  arrived_[param] = true;
  anyArrived_ = true;
  if (plan_.communicates) arrive(param, /*duringBackward=*/true);
}

void GradientReducer::arrive(size_t param, bool duringBackward, bool usedHere) {
  auto [b, slot] = slotOf_[param];
  if (usedHere) {
    collective_.stage(param, b, slot);
  } else {
    collective_.stageUnused(param, b, slot);
  }
  Bucket& bucket = buckets_[b];
  if (--bucket.pending == 0) {
    collective_.seal(b);
    bucket.ready = true;
    if (duringBackward) launchReady(/*duringBackward=*/true);
  }
}

void GradientReducer::launchReady(bool duringBackward) {
  // Strictly in launch order, so every rank issues the same sequence of collectives.
  while (nextToLaunch_ < plan_.order.size() && buckets_[plan_.order[nextToLaunch_]].ready) {
    const size_t b = plan_.order[nextToLaunch_];
    Bucket& bucket = buckets_[b];
    bucket.launched = std::chrono::steady_clock::now();
    bucket.work = collective_.launch(b, stats_);
    ++stats_.bucketsLaunched;
    if (duringBackward) ++stats_.bucketsLaunchedDuringBackward;
    stats_.bytesReduced += collective_.bucketBytes(b);
    ++nextToLaunch_;
  }
}

void GradientReducer::finish() {
  if (!syncEnabled_) return;
  std::string message = missingGradientsError(plan_.names, arrived_, comm_.rank(), anyArrived_);
  if (!message.empty() && !plan_.findUnusedParameters) {
    reset();
    throw Error(message);
  }
  if (!plan_.communicates) {
    // A world of one: a parameter without a gradient is one no rank used; it stays as it is.
    lastTimings_.clear();
    ++stats_.syncs;
    reset();
    return;
  }
  // A parameter autograd reached in an earlier noSync micro-batch contributes what it accumulated;
  // one this rank did not use at all contributes zeros (or what its .grad held) until the used map
  // says whether any rank used it.
  std::vector<size_t> unusedHere;
  for (size_t i = 0; i < arrived_.size(); ++i) {
    if (arrived_[i]) continue;
    if (!usedLocally_[i]) unusedHere.push_back(i);
    arrive(i, /*duringBackward=*/false, /*usedHere=*/usedLocally_[i]);
  }
  launchReady(/*duringBackward=*/false);
  LOCKSTEP_ASSERT(nextToLaunch_ == buckets_.size(), "not every bucket was launched");
  // After the last bucket, so that it is the same collective of the sequence on every rank.
  at::Tensor usedMap;
  WorkHandle usedWork = plan_.findUnusedParameters ? launchUsedMap(usedMap) : nullptr;
  waitAndLand();
  if (usedWork) {
    usedWork->wait();
    at::Tensor used = usedMap.cpu();
    const float* count = used.data_ptr<float>();
    for (size_t i : unusedHere) collective_.settleUnused(i, count[i] > 0.5f);
  }
  if (plan_.broadcastBuffersOf != nullptr && comm_.size() > 1) {
    std::vector<at::Tensor> buffers;
    for (auto& t : plan_.broadcastBuffersOf->buffers(true)) buffers.push_back(t.detach());
    if (!buffers.empty()) comm_.broadcast(buffers, 0)->waitOnStream();
  }
  ++stats_.syncs;
  reset();
}

WorkHandle GradientReducer::launchUsedMap(at::Tensor& usedMap) const {
  at::Tensor mine = at::empty({static_cast<int64_t>(arrived_.size())}, at::kFloat);
  float* flag = mine.data_ptr<float>();
  for (size_t i = 0; i < arrived_.size(); ++i) flag[i] = arrived_[i] || usedLocally_[i] ? 1.0f : 0.0f;
  usedMap = mine.to(plan_.device);
  std::vector<at::Tensor> tensors{usedMap};
  return comm_.allreduce(tensors, ReduceOp::kSum);
}

void GradientReducer::waitAndLand() {
  const bool timed = comm_.size() > 1;  // a world of one communicated nothing
  lastTimings_.resize(timed ? buckets_.size() : 0);
  for (size_t k = 0; k < plan_.order.size(); ++k) {
    const size_t b = plan_.order[k];
    Bucket& bucket = buckets_[b];
    // On a device stream (nccl) the compute stream waits for the bucket: no host wait per bucket.
    if (bucket.work) bucket.work->waitOnStream();
    if (timed) {
      auto completed = bucket.work ? bucket.work->completedAt() : std::chrono::steady_clock::time_point{};
      if (completed == std::chrono::steady_clock::time_point{}) completed = std::chrono::steady_clock::now();
      lastTimings_[k] = BucketTiming{static_cast<int>(k), collective_.bucketBytes(b), bucket.launched, completed};
    }
    collective_.land(b, stats_);
  }
}

bool GradientReducer::collectiveDone(size_t bucket) {
  const WorkHandle& work = buckets_[bucket].work;
  return work && work->test();
}

void GradientReducer::reset() {
  std::fill(arrived_.begin(), arrived_.end(), false);
  std::fill(usedLocally_.begin(), usedLocally_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = static_cast<int>(plan_.buckets[b].size());
    buckets_[b].ready = buckets_[b].pending == 0;  // a bucket without parameters has nothing to wait for
    buckets_[b].work.reset();
    collective_.endStep(b);
  }
  nextToLaunch_ = 0;
  anyArrived_ = false;
}

}  // namespace lockstep::detail

namespace lockstep {

void GradientSync::setSyncEnabled(bool enabled) { reducer_->setSyncEnabled(enabled); }
bool GradientSync::syncEnabled() const { return reducer_->syncEnabled(); }
const SyncStats& GradientSync::stats() const { return reducer_->stats(); }
const std::vector<BucketTiming>& GradientSync::lastSyncTimings() const { return reducer_->lastTimings(); }

}  // namespace lockstep

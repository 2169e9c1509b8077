// sharded_data_parallel.cpp — ZeRO stage 2 (lockstep/ddp/sharded_data_parallel.h):
// buckets reduce-scattered from autograd's accumulation hooks, the update of
// this rank's pieces, and the all-gather of the parameters.
#include "lockstep/ddp/sharded_data_parallel.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ddp/bucket_plan.h"
#include "ddp/sharded_impl.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_text.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {

void ShardedDataParallel::Impl::onAccumulated(size_t index) {
  if (!syncEnabled) return;
  if (arrived[index]) { throw Error(detail::arrivedTwiceError(names[index])); }
  if (!anyArrived) {
    // The last step's averaged parts were used by its update: free them before this step's buckets fill.
    for (auto& view : pieceViews) view.mutable_grad() = at::Tensor();
    for (auto& bucket : buckets) bucket.output.reset();
  }
  auto [b, slot] = slotOf[index];
  Bucket& bucket = buckets[b];
  at::Tensor& grad = params[index].mutable_grad();
  if (bucket.params.size() == 1 && bucket.part * world() == bucket.elements && grad.is_contiguous()) {
    bucket.buffer = grad.view({-1});  // a parameter alone in its bucket, no padding: its gradient is the buffer
  } else {
    ensureBuffer(bucket);
    bucket.buffer.narrow(0, bucket.offsets[slot], numels[index]).copy_(grad.reshape({-1}));
  }
  grad = at::Tensor();  // the bucket has it now: free the whole-size gradient
  arrived[index] = true;
  anyArrived = true;
  if (--bucket.pending == 0) {
    bucket.ready = true;
    launchReady(/*duringBackward=*/true);
  }
}

void ShardedDataParallel::Impl::ensureBuffer(Bucket& bucket) {
  if (bucket.buffer.defined()) return;
  // Before allocating, free the buffers of buckets already reduce-scattered (backward goes on meanwhile).
  for (size_t k = 0; k < nextToLaunch; ++k) {
    if (buckets[k].buffer.defined() && buckets[k].work->isCompleted()) buckets[k].buffer.reset();
  }
  const int64_t padded = bucket.part * world();
  bucket.buffer = at::empty({padded}, at::kFloat);
  if (padded > bucket.elements) bucket.buffer.narrow(0, bucket.elements, padded - bucket.elements).zero_();
}

void ShardedDataParallel::Impl::launchReady(bool duringBackward) {
  while (nextToLaunch < buckets.size() && buckets[nextToLaunch].ready) {
    Bucket& bucket = buckets[nextToLaunch];
    bucket.output = at::empty({bucket.part}, at::kFloat);
    bucket.launched = std::chrono::steady_clock::now();
    bucket.work = comm->reduceScatter(bucket.buffer, bucket.output, ReduceOp::kAvg);
    ++stats.bucketsLaunched;
    if (duringBackward) ++stats.bucketsLaunchedDuringBackward;
    stats.bytesReduced += bucket.elements * 4;
    ++nextToLaunch;
  }
}

void ShardedDataParallel::Impl::finish() {
  if (!syncEnabled) return;
  std::string message = detail::missingGradientsError(names, arrived, rank(), anyArrived);
  if (!message.empty() && !options.findUnusedParameters) {
    reset();
    throw Error(message);
  }
  // Unused parameters contribute what they accumulated locally (or zeros).
  for (size_t i = 0; i < params.size(); ++i) {
    if (arrived[i]) continue;
    auto [b, slot] = slotOf[i];
    Bucket& bucket = buckets[b];
    ensureBuffer(bucket);
    at::Tensor slice = bucket.buffer.narrow(0, bucket.offsets[slot], numels[i]);
    at::Tensor& grad = params[i].mutable_grad();
    if (grad.defined()) {
      slice.copy_(grad.reshape({-1}));
      grad = at::Tensor();
    } else {
      slice.zero_();
    }
    if (--bucket.pending == 0) bucket.ready = true;
  }
  launchReady(/*duringBackward=*/false);
  LOCKSTEP_ASSERT(nextToLaunch == buckets.size(), "not every bucket was launched");
  lastTimings.resize(buckets.size());
  size_t piece = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.work->wait();
    auto completed = bucket.work->completedAt();
    if (completed == std::chrono::steady_clock::time_point{}) completed = std::chrono::steady_clock::now();
    lastTimings[b] = BucketTiming{static_cast<int>(b), bucket.elements * 4, bucket.launched, completed};
    bucket.buffer.reset();
    for (; piece < pieces.size() && pieces[piece].bucket == b; ++piece) {
      pieceViews[piece].mutable_grad() = bucket.output.narrow(0, pieces[piece].chunkOffset, pieces[piece].length);
    }
  }
  if (options.broadcastBuffers && world() > 1) {
    std::vector<at::Tensor> moduleBuffers;
    for (auto& t : module->buffers(true)) moduleBuffers.push_back(t.detach());
    if (!moduleBuffers.empty()) comm->broadcast(moduleBuffers, 0)->wait();
  }
  ++stats.syncs;
  reset();
}

void ShardedDataParallel::Impl::reset() {
  std::fill(arrived.begin(), arrived.end(), false);
  for (auto& bucket : buckets) {
    bucket.pending = static_cast<int>(bucket.params.size());
    bucket.ready = false;
    bucket.work.reset();
    bucket.buffer.reset();
  }
  nextToLaunch = 0;
  anyArrived = false;
}

/// Every rank's updated part of each bucket to every rank, two buckets in flight.
/// A bucket that is one parameter without padding is gathered in place: this
/// rank's piece is the parameter's own chunk, so nothing is copied in or out.
/// Other buckets go through a flat buffer, and only the other ranks' parts of it
/// are copied back (this rank's are in the parameters already).
void ShardedDataParallel::Impl::gatherParameters() {
  c10::NoGradGuard noGrad;
  struct InFlight {
    size_t bucket;
    at::Tensor input, output;
    WorkHandle work;
    bool inPlace;
  };
  std::vector<InFlight> window;
  size_t piece = 0;
  auto launch = [&](size_t b) {
    Bucket& bucket = buckets[b];
    InFlight f{b, {}, {}, nullptr, bucket.params.size() == 1 && bucket.part * world() == bucket.elements};
    if (f.inPlace) {
      f.output = params[bucket.params[0]].detach().view({-1});
      f.input = f.output.narrow(0, rank() * bucket.part, bucket.part);
      while (piece < pieces.size() && pieces[piece].bucket == b) ++piece;
    } else {
      f.input = at::empty({bucket.part}, at::kFloat);
      f.output = at::empty({bucket.part * world()}, at::kFloat);
      int64_t filled = 0;  // pieces fill the part from its start; the rest is padding
      for (; piece < pieces.size() && pieces[piece].bucket == b; ++piece) {
        f.input.narrow(0, pieces[piece].chunkOffset, pieces[piece].length).copy_(pieceViews[piece]);
        filled = pieces[piece].chunkOffset + pieces[piece].length;
      }
      if (filled < bucket.part) f.input.narrow(0, filled, bucket.part - filled).zero_();
    }
    f.work = comm->allgather(f.input, f.output);
    window.push_back(std::move(f));
  };
  auto land = [&] {
    InFlight f = std::move(window.front());
    window.erase(window.begin());
    f.work->wait();
    if (f.inPlace) return;
    const Bucket& bucket = buckets[f.bucket];
    const int64_t mineBegin = rank() * bucket.part, mineEnd = mineBegin + bucket.part;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const size_t p = bucket.params[slot];
      const int64_t begin = bucket.offsets[slot], end = begin + numels[p];
      at::Tensor flat = params[p].detach().view({-1});
      // [begin, end) of the bucket, less this rank's part: what lies before it and after it.
      auto copy = [&](int64_t from, int64_t to) {
        if (from < to) flat.narrow(0, from - begin, to - from).copy_(f.output.narrow(0, from, to - from));
      };
      copy(begin, std::min(end, mineBegin));
      copy(std::max(begin, mineEnd), end);
    }
  };
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (window.size() == 2) land();
    launch(b);
  }
  while (!window.empty()) land();
}

ShardedDataParallel::ShardedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                                         std::unique_ptr<torch::optim::Optimizer> optimizer, DdpOptions options)
    : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(module != nullptr && comm != nullptr && optimizer != nullptr,
                 "ShardedDataParallel needs a module, a communicator and an optimizer");
  LOCKSTEP_CHECK(options.compression == GradCompression::kNone && options.hook == nullptr,
                 "ZeRO-2 reduce-scatters float32 gradients; gradient compression and comm hooks are DDP's only "
                 "(set ddp.compression: none, or use strategy.type: ddp)");
  Impl& s = *impl_;
  s.module = std::move(module);
  s.comm = std::move(comm);
  s.options = options;
  s.collectParameters(*s.module, "ZeRO-2");
  if (options.checkConsistency) checkModuleConsistency(*s.module, *s.comm);
  broadcastModule(*s.module, *s.comm);

  auto plan = detail::planBuckets(s.numels, options);
  s.slotOf.resize(s.params.size());
  for (auto& members : plan) {
    auto& bucket = s.buckets.emplace_back();
    for (size_t k : members) {
      s.slotOf[k] = {s.buckets.size() - 1, bucket.params.size()};
      bucket.params.push_back(k);
      bucket.offsets.push_back(bucket.elements);
      bucket.elements += s.numels[k];
    }
    bucket.part = (bucket.elements + s.world() - 1) / s.world();
  }
  s.plan = plan;
  s.pieces = gradientPieces(plan, s.numels, s.world(), s.rank());
  for (const auto& piece : s.pieces) { s.pieceViews.push_back(s.viewOf(piece)); }
  s.buildOptimizer(*optimizer);
  s.arrived.assign(s.params.size(), false);
  s.reset();

  std::weak_ptr<Impl> weak = impl_;
  s.hookAccumulation([weak](size_t i) {
    if (auto impl = weak.lock()) impl->onAccumulated(i);
  });
  log::debug(fmt::format("ZeRO-2: {} parameters in {} bucket(s), {} piece(s) on rank {}", s.params.size(),
                         s.buckets.size(), s.pieces.size(), s.rank()));
}

ShardedDataParallel::~ShardedDataParallel() { impl_->unhook(); }

void ShardedDataParallel::finishGradientSync() { impl_->finish(); }

double ShardedDataParallel::clipGradNorm(double maxNorm) { return impl_->clipGradNorm(maxNorm); }

void ShardedDataParallel::step() {
  impl_->optimizer->step();
  if (impl_->world() > 1) impl_->gatherParameters();
}

void ShardedDataParallel::setSyncEnabled(bool enabled) { impl_->syncEnabled = enabled; }
bool ShardedDataParallel::syncEnabled() const { return impl_->syncEnabled; }
ShardedDataParallel::NoSyncGuard::NoSyncGuard(ShardedDataParallel& owner)
    : owner_(owner), previous_(owner.syncEnabled()) {
  owner_.setSyncEnabled(false);
}
ShardedDataParallel::NoSyncGuard::~NoSyncGuard() { owner_.setSyncEnabled(previous_); }

torch::optim::Optimizer& ShardedDataParallel::optimizer() { return *impl_->optimizer; }
void ShardedDataParallel::saveState(TensorArchive* archive) { impl_->save(archive); }
void ShardedDataParallel::loadState(const TensorArchive& archive, bool report) { impl_->load(archive, report); }
int ShardedDataParallel::numBuckets() const { return static_cast<int>(impl_->buckets.size()); }
const std::vector<GradientPiece>& ShardedDataParallel::pieces() const { return impl_->pieces; }
const DdpStats& ShardedDataParallel::stats() const { return impl_->stats; }
const std::vector<BucketTiming>& ShardedDataParallel::lastSyncTimings() const { return impl_->lastTimings; }

int64_t ShardedDataParallel::ownedElements() const { return impl_->ownedElements(); }

int64_t ShardedDataParallel::gradientBytes() const {
  int64_t bytes = 0;
  for (const auto& bucket : impl_->buckets) {
    if (bucket.output.defined()) bytes += static_cast<int64_t>(bucket.output.nbytes());
  }
  return bytes + impl_->wholeGradientBytes();  // and what noSync() accumulated
}

int64_t ShardedDataParallel::stateBytes() const { return optimizerStateBytes(*impl_->optimizer); }

int64_t ShardedDataParallel::bufferBytes() const {
  int64_t bytes = 0;
  for (const auto& bucket : impl_->buckets) {
    if (bucket.buffer.defined()) bytes += static_cast<int64_t>(bucket.buffer.nbytes());
  }
  return bytes;
}

}  // namespace lockstep

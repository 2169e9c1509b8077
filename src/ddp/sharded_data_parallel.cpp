// sharded_data_parallel.cpp — ZeRO stage 2 (lockstep/ddp/sharded_data_parallel.h):
// buckets reduce-scattered from autograd's accumulation hooks, the update of
// this rank's pieces, and the all-gather of the parameters.
#include "lockstep/ddp/sharded_data_parallel.h"

#include <c10/core/GradMode.h>
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

void ShardedDataParallel::Impl::stage(size_t param, size_t b, size_t slot) {
  detail::ShardedBucket& bucket = buckets[b];
  at::Tensor& grad = params[param].mutable_grad();
  if (grad.defined() && bucket.params.size() == 1 && bucket.part * world() == bucket.elements && grad.is_contiguous()) {
    bucket.buffer = grad.view({-1});  // a parameter alone in its bucket, no padding: its gradient is the buffer
    grad = at::Tensor();
    return;
  }
  ensureBuffer(bucket);
  takeGradient(param, bucket.buffer.narrow(0, bucket.offsets[slot], numels[param]));
}

void ShardedDataParallel::Impl::ensureBuffer(detail::ShardedBucket& bucket) {
  if (bucket.buffer.defined()) return;
  // Before allocating, free the buffers of buckets already reduce-scattered (backward goes on meanwhile).
  for (size_t k = 0; k < buckets.size(); ++k) {
    if (buckets[k].buffer.defined() && reducer->collectiveDone(k)) buckets[k].buffer.reset();
  }
  bucket.buffer = at::empty({bucket.part * world()}, floatOptions());
  zeroPadding(bucket, bucket.buffer);
}

void ShardedDataParallel::Impl::land(size_t b, SyncStats& /*stats*/) { buckets[b].buffer.reset(); }
void ShardedDataParallel::Impl::endStep(size_t b) { buckets[b].buffer.reset(); }

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
    detail::ShardedBucket& bucket = buckets[b];
    InFlight f{b, {}, {}, nullptr, bucket.params.size() == 1 && bucket.part * world() == bucket.elements};
    if (f.inPlace) {
      f.output = params[bucket.params[0]].detach().view({-1});
      f.input = f.output.narrow(0, rank() * bucket.part, bucket.part);
      while (piece < pieces.size() && pieces[piece].bucket == b) ++piece;
    } else {
      f.input = at::empty({bucket.part}, floatOptions());
      f.output = at::empty({bucket.part * world()}, floatOptions());
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
    f.work->waitOnStream();
    if (f.inPlace) return;
    const detail::ShardedBucket& bucket = buckets[f.bucket];
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
                                         std::unique_ptr<torch::optim::Optimizer> optimizer, SyncOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& s = *impl_;
  s.setUp(std::move(module), std::move(comm), optimizer.get(), options, "ShardedDataParallel", "ZeRO-2");
  if (options.checkConsistency) checkModuleConsistency(*s.module, *s.comm);
  broadcastModule(*s.module, *s.comm);

  s.buildBuckets(detail::planBuckets(s.numels, options));
  s.pieces = gradientPieces(s.plan, s.numels, s.world(), s.rank());
  for (const auto& piece : s.pieces) s.pieceViews.push_back(s.viewOf(piece));
  s.buildOptimizer(*optimizer);
  std::weak_ptr<Impl> weak = impl_;
  s.startReducer(/*reversed=*/false, [weak](size_t i) {
    if (auto impl = weak.lock()) impl->reducer->onGradient(i);
  });
  reducer_ = s.reducer.get();
  core_ = &s;
  log::debug(fmt::format("ZeRO-2: {} parameters in {} bucket(s), {} piece(s) on rank {}", s.params.size(),
                         s.buckets.size(), s.pieces.size(), s.rank()));
}

ShardedDataParallel::~ShardedDataParallel() { impl_->reducer->unhook(); }

void ShardedDataParallel::finishGradientSync() { impl_->finishSync(); }

void ShardedDataParallel::step() {
  impl_->optimizer->step();
  if (impl_->world() > 1) impl_->gatherParameters();
}

void ShardedDataParallel::saveState(TensorArchive* archive) { impl_->save(archive); }
void ShardedDataParallel::loadState(const TensorArchive& archive, bool report) { impl_->load(archive, report); }
int ShardedDataParallel::numBuckets() const { return static_cast<int>(impl_->buckets.size()); }
const std::vector<GradientPiece>& ShardedDataParallel::pieces() const { return impl_->pieces; }

int64_t ShardedDataParallel::parameterBytes() const {
  int64_t bytes = 0;
  for (const auto& p : impl_->module->parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

}  // namespace lockstep

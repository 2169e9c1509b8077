// sharded_core.cpp — src/ddp/sharded_core.h.
#include "ddp/sharded_core.h"

#include <algorithm>

#include "lockstep/common/error.h"

namespace lockstep::detail {

void ShardedCore::setUp(std::shared_ptr<torch::nn::Module> m, std::shared_ptr<Communicator> c,
                        const torch::optim::Optimizer* optimizer, const SyncOptions& o, const char* front,
                        const char* stage) {
  LOCKSTEP_CHECK(m != nullptr && c != nullptr && optimizer != nullptr, front,
                 " needs a module, a communicator and an optimizer");
  LOCKSTEP_CHECK(o.compression == GradCompression::kNone && o.hook == nullptr, stage,
                 " reduce-scatters float32 gradients; gradient compression and comm hooks are DDP's only "
                 "(set ddp.compression: none, or use strategy.type: ddp)");
  module = std::move(m);
  comm = std::move(c);
  options = o;
  collectParameters(*module, stage);
}

void ShardedCore::buildBuckets(const std::vector<std::vector<size_t>>& members) {
  for (const auto& group : members) {
    ShardedBucket& bucket = buckets.emplace_back();
    for (size_t k : group) {
      bucket.params.push_back(k);
      bucket.offsets.push_back(bucket.elements);
      bucket.elements += numels[k];
    }
    bucket.part = (bucket.elements + world() - 1) / world();  // 0 for a group without parameters
  }
  plan = members;
}

void ShardedCore::startReducer(bool reversed, std::function<void(size_t)> onAccumulated) {
  ReducerPlan reducerPlan = makeReducerPlan(names, plan, reversed, options, *module);
  reducerPlan.device = floatOptions().device();
  usedByNoRank.assign(params.size(), false);
  reducer = std::make_unique<GradientReducer>(std::move(reducerPlan), *this, *comm);
  reducer->hook(params, std::move(onAccumulated));
}

void ShardedCore::takeGradient(size_t param, const at::Tensor& slice) {
  at::Tensor& grad = params[param].mutable_grad();
  if (grad.defined()) {
    slice.copy_(grad.reshape({-1}));
    grad = at::Tensor();  // the bucket has it now: free the whole-size gradient
  } else {
    slice.zero_();  // unused (findUnusedParameters)
  }
}

void ShardedCore::zeroPadding(const ShardedBucket& bucket, const at::Tensor& flat) const {
  const int64_t padded = bucket.part * world();
  if (padded > bucket.elements) flat.narrow(0, bucket.elements, padded - bucket.elements).zero_();
}

bool ShardedCore::finishSync() {
  if (!reducer->syncEnabled()) return false;
  std::fill(usedByNoRank.begin(), usedByNoRank.end(), false);
  reducer->finish();
  for (size_t k = 0; k < pieces.size(); ++k) {
    const ShardedBucket& bucket = buckets[pieces[k].bucket];
    pieceViews[k].mutable_grad() =
        usedByNoRank[pieces[k].param] ? at::Tensor() : bucket.output.narrow(0, pieces[k].chunkOffset, pieces[k].length);
  }
  return true;
}

void ShardedCore::startStep() {
  // The last step's averaged parts were used by its update: free them before this step's buckets fill.
  for (auto& view : pieceViews) view.mutable_grad() = at::Tensor();
  for (auto& bucket : buckets) bucket.output.reset();
}

WorkHandle ShardedCore::launch(size_t b, SyncStats& /*stats*/) {
  ShardedBucket& bucket = buckets[b];
  bucket.output = at::empty({bucket.part}, floatOptions());
  return comm->reduceScatter(bucket.buffer, bucket.output, ReduceOp::kAvg);
}

int64_t ShardedCore::gradientBytes() const {
  int64_t bytes = 0;
  for (const auto& bucket : buckets) {
    if (bucket.output.defined()) bytes += static_cast<int64_t>(bucket.output.nbytes());
  }
  return bytes + wholeGradientBytes();
}

int64_t ShardedCore::bufferBytes() const {
  int64_t bytes = 0;
  for (const auto& bucket : buckets) {
    if (bucket.buffer.defined()) bytes += static_cast<int64_t>(bucket.buffer.nbytes());
  }
  return bytes;
}

}  // namespace lockstep::detail

// fully_sharded_data_parallel.cpp — ZeRO stage 3 (lockstep/ddp/fully_sharded_data_parallel.h):
// units gathered around their forward and backward and freed after, their
// gradients reduce-scattered from autograd's accumulation hooks, and the
// update of this rank's shards.
#include "lockstep/ddp/fully_sharded_data_parallel.h"

#include <ATen/native/Resize.h>
#include <ATen/native/cuda/Resize.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ddp/bucket_plan.h"
#include "ddp/fully_sharded_impl.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_text.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {

namespace {

/// Gives `t`'s storage `bytes` bytes (0 frees it); every view of the storage sees the change.
/// (resize_bytes_cpu/_cuda allocate and copy even to the same size: skip that.)
void resizeStorage(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  if (t.is_cuda()) {
    at::native::resize_bytes_cuda(storage, bytes);
  } else {
    at::native::resize_bytes_cpu(storage, bytes);
  }
}

}  // namespace

void FullyShardedDataParallel::Impl::Unit::allocate() {
  resizeStorage(whole, static_cast<size_t>(whole.numel()) * sizeof(float));
}
void FullyShardedDataParallel::Impl::Unit::release() { resizeStorage(whole, 0); }

std::vector<std::vector<size_t>> planUnits(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                                           const std::vector<Layer>& layers) {
  std::vector<std::vector<size_t>> units;
  if (layers.empty()) {
    units.emplace_back();
    for (size_t i = 0; i < params.size(); ++i) units.back().push_back(i);
    return units;
  }
  std::map<const void*, size_t> indexOf;
  for (size_t i = 0; i < params.size(); ++i) indexOf[params[i].unsafeGetTensorImpl()] = i;
  std::vector<int> unitOf(params.size(), -1);
  for (size_t l = 0; l < layers.size(); ++l) {
    auto& unit = units.emplace_back();
    for (const auto& m : layers[l].modules) {
      for (const auto& p : m->parameters(true)) {
        auto it = indexOf.find(p.unsafeGetTensorImpl());
        if (it == indexOf.end()) continue;  // frozen
        const size_t i = it->second;
        if (unitOf[i] == static_cast<int>(l)) continue;  // two modules of the layer share it
        LOCKSTEP_CHECK(unitOf[i] < 0, "ZeRO-3: parameter '", names[i], "' is used by layer '", layers[unitOf[i]].name,
                       "' and by layer '", layers[l].name, "'; a parameter must belong to one unit");
        unitOf[i] = static_cast<int>(l);
        unit.push_back(i);
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    LOCKSTEP_CHECK(unitOf[i] >= 0, "ZeRO-3: parameter '", names[i],
                   "' belongs to no layer of the chain given; every trainable parameter must be in one unit");
  }
  return units;
}

void FullyShardedDataParallel::Impl::buildUnits(const std::vector<std::vector<size_t>>& members) {
  c10::NoGradGuard noGrad;
  buildBuckets(members);
  for (size_t u = 0; u < members.size(); ++u) {
    const detail::ShardedBucket& bucket = buckets[u];
    Unit& unit = units.emplace_back();
    unit.name = layers.empty() ? "model" : layers[u].name;
    unit.whole = at::zeros({bucket.part * world()}, floatOptions());
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      at::Tensor& p = params[bucket.params[slot]];
      at::Tensor view = unit.whole.narrow(0, bucket.offsets[slot], numels[bucket.params[slot]]).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);  // the same parameter (autograd, optimizer, module), its data now in the unit
    }
    unit.shard = unit.whole.narrow(0, bucket.part * rank(), bucket.part).clone();
    unit.release();
  }
}

void FullyShardedDataParallel::Impl::launchGather(size_t u) {
  Unit& unit = units[u];
  // Asked for again while gathered (a unit with unused parameters stays gathered from the last
  // micro-batch until finish): a new forward, whose backward accumulates all of its gradients anew.
  if (unit.gathered) unit.backwardPending = static_cast<int>(buckets[u].params.size());
  if (unit.gathered || unit.gathering) return;
  unit.allocate();
  const detail::ShardedBucket& bucket = buckets[u];
  if (bucket.elements > 0) ++gathers;
  if (bucket.elements == 0 || world() == 1) {
    unit.whole.copy_(unit.shard);
    unit.gathered = true;
    unit.backwardPending = static_cast<int>(bucket.params.size());
    return;
  }
  unit.gathering = comm->allgather(unit.shard, unit.whole);
}

void FullyShardedDataParallel::Impl::ensureGathered(size_t u) {
  launchGather(u);
  Unit& unit = units[u];
  if (unit.gathered) return;
  unit.gathering->waitOnStream();
  unit.gathering.reset();
  unit.gathered = true;
  unit.backwardPending = static_cast<int>(buckets[u].params.size());
}

void FullyShardedDataParallel::Impl::free(size_t u) {
  Unit& unit = units[u];
  if (buckets[u].buffer.defined()) {  // lent to a reduce-scatter: finish() frees it once that is done
    unit.gathered = false;
    return;
  }
  if (unit.gathering) ensureGathered(u);  // never free memory a collective is writing
  if (!unit.gathered) return;
  unit.release();
  unit.gathered = false;
}

void FullyShardedDataParallel::Impl::freeAll() {
  for (size_t u = 0; u < units.size(); ++u) free(u);
}

at::Tensor FullyShardedDataParallel::Impl::forward(const at::Tensor& input) {
  LOCKSTEP_CHECK(!restored,
                 "FullyShardedDataParallel: restoreModule() ended the sharded training; train the module "
                 "without it, or build a new one");
  LOCKSTEP_CHECK(!layers.empty(),
                 "FullyShardedDataParallel::forward runs the chain of layers given at construction; with none, call "
                 "gatherAll() and run the module yourself");
  const bool backwardFollows = at::GradMode::is_enabled();
  std::weak_ptr<Impl> weak = self;
  at::Tensor x = input;
  for (size_t u = 0; u < units.size(); ++u) {
    ensureGathered(u);
    if (u + 1 < units.size()) launchGather(u + 1);  // prefetch: the next unit arrives while this one computes
    at::Tensor y = layers[u].forward(x);
    if (backwardFollows && y.requires_grad()) {
      // Runs when backward reaches this layer's output, before any of the layer's backward.
      y.register_hook([weak, u](const at::Tensor& grad) {
        if (auto impl = weak.lock()) {
          impl->releaseFinished();
          impl->ensureGathered(u);
          if (u > 0) impl->launchGather(u - 1);
        }
        return grad;
      });
    }
    if (!backwardFollows || u + 1 < units.size()) free(u);  // the last unit is the first backward needs
    x = std::move(y);
  }
  return x;
}

void FullyShardedDataParallel::Impl::onAccumulated(size_t index) {
  reducer->onGradient(index);
  // Every gradient of the unit accumulated: its backward is over, its parameters are not needed until the next forward.
  // Not with unused parameters: whether a unit's gradients all arrive then differs between ranks, and so would
  // the next micro-batch's all-gather of it; such units are freed by finishGradientSync() on every rank.
  if (options.findUnusedParameters) return;
  const size_t u = reducer->slotOf(index).first;
  Unit& unit = units[u];
  if (unit.gathered && --unit.backwardPending == 0) free(u);
}

void FullyShardedDataParallel::Impl::seal(size_t u) {
  // The unit's backward is over, so the memory of its gathered parameters takes its gradients for the
  // reduce-scatter (no second whole-unit buffer); it is freed when the reduce-scatter is done.
  Unit& unit = units[u];
  detail::ShardedBucket& bucket = buckets[u];
  if (unit.gathering) {
    unit.gathering->waitOnStream();
    unit.gathering.reset();
  }
  releaseFinished();
  unit.allocate();
  unit.gathered = false;
  for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
    const size_t i = bucket.params[slot];
    takeGradient(i, unit.whole.narrow(0, bucket.offsets[slot], numels[i]));
  }
  zeroPadding(bucket, unit.whole);
  bucket.buffer = unit.whole;
}

void FullyShardedDataParallel::Impl::releaseFinished() {
  for (size_t u = 0; u < units.size(); ++u) {
    if (buckets[u].buffer.defined() && reducer->collectiveDone(u)) {
      buckets[u].buffer.reset();
      units[u].release();
    }
  }
}

WorkHandle FullyShardedDataParallel::Impl::launch(size_t u, SyncStats& stats) {
  detail::ShardedBucket& bucket = buckets[u];
  if (bucket.elements > 0 && world() > 1) return ShardedCore::launch(u, stats);
  // Nothing to communicate: this rank's part is the whole.
  bucket.output = at::empty({bucket.part}, floatOptions());
  if (bucket.elements > 0) bucket.output.copy_(bucket.buffer);
  bucket.buffer.reset();
  units[u].release();
  return nullptr;
}

void FullyShardedDataParallel::Impl::land(size_t u, SyncStats& /*stats*/) {
  if (!buckets[u].buffer.defined()) return;
  buckets[u].buffer.reset();
  units[u].release();  // the parameters' memory, lent to the reduce-scatter
}

// After an error the unit's memory stays until the next gather: a collective may still write it.
void FullyShardedDataParallel::Impl::endStep(size_t u) { buckets[u].buffer.reset(); }

void FullyShardedDataParallel::Impl::finish() {
  bool synced = false;
  try {
    synced = finishSync();
  } catch (...) {
    freeAll();
    throw;
  }
  if (synced) freeAll();
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> module, std::vector<Layer> layers,
                                                   std::shared_ptr<Communicator> comm,
                                                   std::unique_ptr<torch::optim::Optimizer> optimizer,
                                                   SyncOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& s = *impl_;
  s.setUp(std::move(module), std::move(comm), optimizer.get(), options, "FullyShardedDataParallel", "ZeRO-3");
  // A unit's memory is freed and brought back by resizing its storage in place: CPU or CUDA storage.
  const c10::Device device = s.floatOptions().device();
  LOCKSTEP_CHECK(device.is_cpu() || device.is_cuda(),
                 "FullyShardedDataParallel (ZeRO-3) takes CPU or CUDA parameters; on ", device.str(),
                 " use DistributedDataParallel or ShardedDataParallel (ZeRO-2)");
  s.layers = std::move(layers);
  LOCKSTEP_CHECK(!s.params.empty(), "ZeRO-3: the module has no trainable parameters");
  auto members = planUnits(s.params, s.names, s.layers);
  if (options.checkConsistency) checkModuleConsistency(*s.module, *s.comm);
  broadcastModule(*s.module, *s.comm);
  s.buildUnits(members);
  s.pieces = gradientPieces(s.plan, s.numels, s.world(), s.rank());
  for (const auto& piece : s.pieces) {
    s.pieceViews.push_back(s.units[piece.bucket].shard.narrow(0, piece.chunkOffset, piece.length));
  }
  s.buildOptimizer(*optimizer);
  std::weak_ptr<Impl> weak = impl_;
  s.self = weak;
  s.startReducer(/*reversed=*/true, [weak](size_t i) {
    if (auto impl = weak.lock()) impl->onAccumulated(i);
  });
  reducer_ = s.reducer.get();
  core_ = &s;
  log::debug(fmt::format("ZeRO-3: {} parameters in {} unit(s), {} piece(s) on rank {}", s.params.size(), s.units.size(),
                         s.pieces.size(), s.rank()));
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  impl_->reducer->unhook();
  if (!impl_->restored) {
    // The values live in the shards, which go now: leave empty parameters rather than dangling views.
    for (auto& unit : impl_->units) {
      if (unit.gathering) unit.gathering->wait();
    }
    for (auto& p : impl_->params) p.set_data(at::empty({0}, p.options()));
  }
}

at::Tensor FullyShardedDataParallel::forward(const at::Tensor& input) { return impl_->forward(input); }
void FullyShardedDataParallel::gatherAll() {
  LOCKSTEP_CHECK(!impl_->restored, "FullyShardedDataParallel: restoreModule() ended the sharded training");
  for (size_t u = 0; u < impl_->units.size(); ++u) impl_->launchGather(u);
  for (size_t u = 0; u < impl_->units.size(); ++u) impl_->ensureGathered(u);
}
void FullyShardedDataParallel::release() { impl_->freeAll(); }

void FullyShardedDataParallel::restoreModule() {
  Impl& s = *impl_;
  if (s.restored) return;
  c10::NoGradGuard noGrad;
  for (size_t u = 0; u < s.units.size(); ++u) {
    s.ensureGathered(u);
    if (u + 1 < s.units.size()) s.launchGather(u + 1);
    for (size_t i : s.buckets[u].params) s.params[i].set_data(s.params[i].detach().clone());
    s.free(u);
  }
  s.restored = true;
}
void FullyShardedDataParallel::finishGradientSync() { impl_->finish(); }

void FullyShardedDataParallel::step() { impl_->optimizer->step(); }

void FullyShardedDataParallel::saveState(TensorArchive* archive) { impl_->saveModelAndOptimizer(archive); }
void FullyShardedDataParallel::loadState(const TensorArchive& archive, bool report) {
  impl_->loadModel(archive);
  impl_->load(archive, report);
}

int FullyShardedDataParallel::numUnits() const { return static_cast<int>(impl_->units.size()); }
int64_t FullyShardedDataParallel::gathers() const { return impl_->gathers; }

int64_t FullyShardedDataParallel::parameterBytes() const {
  int64_t bytes = 0;
  for (const auto& unit : impl_->units) {
    bytes += static_cast<int64_t>(unit.shard.nbytes());
    if (unit.gathered || unit.gathering) bytes += static_cast<int64_t>(unit.whole.nbytes());
  }
  return bytes;
}

}  // namespace lockstep

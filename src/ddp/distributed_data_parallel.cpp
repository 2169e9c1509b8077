#include "lockstep/ddp/distributed_data_parallel.h"

#include <torch/nn/module.h>

#include <fmt/format.h>

#include <numeric>

#include "ddp/bucket_plan.h"
#include "ddp/gradient_reducer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_text.h"

namespace lockstep {

std::vector<std::string> parameterSignature(const torch::nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    lines.push_back(fmt::format("parameter {} {}", p.key(), describeTensor(p.value())));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    lines.push_back(fmt::format("buffer {} {}", b.key(), describeTensor(b.value())));
  }
  return lines;
}

void checkModuleConsistency(const torch::nn::Module& module, Communicator& comm) {
  auto lines = parameterSignature(module);
  std::string mine;
  for (const auto& l : lines) mine += l + "\n";
  int world = comm.size();
  at::Tensor length = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  at::Tensor lengths = at::empty({world}, at::kLong);
  comm.allgather(length, lengths)->wait();
  int64_t longest = lengths.max().item<int64_t>();
  at::Tensor bytes = at::zeros({longest}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  at::Tensor all = at::empty({world * longest}, at::kByte);
  comm.allgather(bytes, all)->wait();
  auto linesOf = [&](int r) {
    const char* base = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * longest;
    std::string text(base, static_cast<size_t>(lengths[r].item<int64_t>()));
    std::vector<std::string> out;
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      out.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
    return out;
  };
  auto reference = linesOf(0);
  for (int r = 1; r < world; ++r) {
    auto other = linesOf(r);
    if (other == reference) continue;
    size_t i = 0;
    while (i < reference.size() && i < other.size() && reference[i] == other[i]) ++i;
    std::string left = i < reference.size() ? "'" + reference[i] + "'"
                                            : "nothing (it has " + std::to_string(reference.size()) + " entries)";
    std::string right =
        i < other.size() ? "'" + other[i] + "'" : "nothing (it has " + std::to_string(other.size()) + " entries)";
    throw Error(
        fmt::format("the model differs between ranks: entry #{} is {} on rank 0 but {} on rank {}; every "
                    "rank must build the same model (same parameters, shapes, dtypes, registration order)",
                    i, left, right, r));
  }
}

void broadcastModule(torch::nn::Module& module, Communicator& comm) {
  std::vector<at::Tensor> tensors;
  // Detached aliases: the copy into a leaf that requires grad must not be tracked.
  for (auto& p : module.parameters(true)) tensors.push_back(p.detach());
  for (auto& b : module.buffers(true)) tensors.push_back(b.detach());
  if (!tensors.empty()) comm.broadcast(tensors, 0)->wait();
}

namespace {

/// A tensor over the same memory as `view` that autograd does not know as a view: these become
/// .grad, and LibTorch's Optimizer::zero_grad() calls detach_() on every .grad, which throws for views.
at::Tensor aliasOf(const at::Tensor& view) {
  at::Tensor alias = at::empty({0}, view.options());
  alias.set_(view.storage(), view.storage_offset(), view.sizes(), view.strides());
  return alias;
}

}  // namespace

/// DDP's buckets over the GradientReducer: each a flat float32 buffer whose slots are the
/// parameters' .grad, averaged in place by the comm hook (allreduce unless compressing).
struct DistributedDataParallel::Impl : detail::BucketCollective {
  struct Bucket {
    std::vector<size_t> params;  // indices into params
    std::vector<int64_t> offsets;
    at::Tensor buffer;
    at::Tensor scratch;
    std::vector<at::Tensor> gradients;  ///< aliases of buffer shaped like the parameters, one per slot (the .grad)
  };

  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Communicator> comm;
  SyncOptions options;
  std::shared_ptr<CommHook> hook;
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<Bucket> buckets;
  c10::Device device{c10::kCPU};  ///< where every parameter, and so every bucket, lives
  std::unique_ptr<detail::GradientReducer> reducer;
  bool alone = false;           ///< a world of one: no buckets are copied or communicated
  bool lendsGradients = false;  ///< the hook takes a lone parameter's gradient as its bucket

  void stage(size_t param, size_t b, size_t slot) override {
    // .grad holds what backward produced plus whatever it held before (noSync accumulation):
    // exactly what gets averaged.
    bindToBucket(buckets[b], slot, params[param]);
  }

  /// Makes .grad the bucket's slot, copying its value in unless it already is that slot (a
  /// gradient autograd accumulated into the slot in place). After it, the average written into the
  /// bucket is the .grad, with no copy back. A parameter alone in its bucket lends its gradient
  /// instead, where the hook allows: that tensor becomes the bucket, and nothing is copied at all.
  void bindToBucket(Bucket& bucket, size_t slot, at::Tensor& param) {
    const at::Tensor& grad = param.grad();
    at::Tensor& place = bucket.gradients[slot];
    if (grad.defined() && grad.data_ptr() == place.data_ptr()) return;
    if (lendsGradients && bucket.params.size() == 1 && grad.defined() && grad.is_contiguous()) {
      place = grad;
      bucket.buffer = grad.view({-1});
      return;
    }
    if (grad.defined()) {
      place.copy_(grad);
    } else {
      place.zero_();
    }
    param.mutable_grad() = place;
  }

  /// The slot takes what .grad holds, zeros when none; .grad stays as it is: a gradient bound to the
  /// slot in an earlier step is given memory of its own, so that the average cannot overwrite it.
  void stageUnused(size_t param, size_t b, size_t slot) override {
    at::Tensor& grad = params[param].mutable_grad();
    at::Tensor& place = buckets[b].gradients[slot];
    if (!grad.defined()) {
      place.zero_();
    } else if (grad.data_ptr() == place.data_ptr()) {
      grad = grad.clone();  // the slot keeps the same values, and contributes them
    } else {
      place.copy_(grad);
    }
  }

  /// Used by another rank: the average is the gradient. Used by none: .grad is as it was.
  void settleUnused(size_t param, bool usedByAnyRank) override {
    if (!usedByAnyRank) return;
    auto [b, slot] = reducer->slotOf(param);
    params[param].mutable_grad() = buckets[b].gradients[slot];
  }

  GradBucket viewOf(size_t b) {
    Bucket& bucket = buckets[b];
    return GradBucket{static_cast<int>(b), &bucket.buffer, &bucket.scratch, &bucket.gradients};
  }

  WorkHandle launch(size_t b, SyncStats& stats) override {
    GradBucket view = viewOf(b);
    WorkHandle work = hook->start(*comm, view);
    stats.bytesSent += view.bytesSent;
    return work;
  }

  void land(size_t b, SyncStats& stats) override {
    GradBucket view = viewOf(b);
    hook->finish(*comm, view);  // the averages are now in the bucket, that is, in every .grad
    stats.bytesSent += view.bytesSent;
  }

  int64_t bucketBytes(size_t b) const override { return buckets[b].buffer.numel() * 4; }

  /// Buckets in reverse registration order: backward produces the last layers' gradients first.
  void planBuckets() {
    std::vector<int64_t> numels;
    for (const auto& p : params) numels.push_back(p.numel());
    for (auto& members : detail::planBuckets(numels, options)) {
      auto& bucket = buckets.emplace_back();
      int64_t offset = 0;
      for (size_t k : members) {
        bucket.params.push_back(k);
        bucket.offsets.push_back(offset);
        offset += numels[k];
      }
      // A world of one communicates nothing: its gradients stay in .grad, so no
      // bucket copies are allocated (one float32 copy of the model saved).
      if (alone) continue;
      // Uninitialised: every slot is written (copied, zeroed, or lent) before its bucket is launched,
      // and a lent bucket's first buffer is never touched at all.
      bucket.buffer = at::empty({offset}, at::TensorOptions().dtype(at::kFloat).device(device));
      for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
        const at::Tensor& p = params[bucket.params[slot]];
        bucket.gradients.push_back(aliasOf(bucket.buffer.narrow(0, bucket.offsets[slot], p.numel()).view(p.sizes())));
      }
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<Communicator> comm, SyncOptions options)
    : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(module != nullptr, "DistributedDataParallel needs a module");
  LOCKSTEP_CHECK(comm != nullptr, "DistributedDataParallel needs a communicator");
  LOCKSTEP_CHECK(options.bucketCapMb > 0, "bucket cap must be positive, got ", options.bucketCapMb, " MB");
  LOCKSTEP_CHECK(options.firstBucketCapMb > 0, "first bucket cap must be positive, got ", options.firstBucketCapMb,
                 " MB");
  Impl& s = *impl_;
  s.module = std::move(module);
  s.comm = std::move(comm);
  s.options = options;
  s.hook = options.hook ? options.hook : makeCommHook(options.compression, options.powerSgd);
  s.lendsGradients = s.hook->acceptsLentGradients();

  for (const auto& p : s.module->named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    if (s.params.empty()) s.device = p.value().device();
    LOCKSTEP_CHECK(p.value().scalar_type() == at::kFloat && p.value().device() == s.device, "parameter '", p.key(),
                   "' is ", describeTensor(p.value()), " on ", p.value().device().str(), " (the first one is on ",
                   s.device.str(), "); DistributedDataParallel handles float32 parameters on one device");
    s.params.push_back(p.value());
    s.names.push_back(p.key());
  }
  if (options.checkConsistency) checkModuleConsistency(*s.module, *s.comm);
  broadcastModule(*s.module, *s.comm);

  s.alone = s.comm->size() == 1;
  s.planBuckets();
  std::vector<std::vector<size_t>> members;
  for (const auto& bucket : s.buckets) members.push_back(bucket.params);
  auto plan = detail::makeReducerPlan(s.names, std::move(members), /*reversed=*/false, options, *s.module);
  plan.communicates = !s.alone;
  plan.device = s.device;
  s.reducer = std::make_unique<detail::GradientReducer>(std::move(plan), s, *s.comm);
  reducer_ = s.reducer.get();
  std::weak_ptr<Impl> weak = impl_;
  s.reducer->hook(s.params, [weak](size_t i) {
    if (auto impl = weak.lock()) impl->reducer->onGradient(i);
  });
  log::debug(fmt::format("DDP: {} parameters in {} bucket(s) of <= {} MB, hook {}", s.params.size(), s.buckets.size(),
                         options.bucketCapMb, s.hook->name()));
}

DistributedDataParallel::~DistributedDataParallel() { impl_->reducer->unhook(); }

void DistributedDataParallel::finishGradientSync() { impl_->reducer->finish(); }
int DistributedDataParallel::numBuckets() const { return static_cast<int>(impl_->buckets.size()); }

int64_t DistributedDataParallel::bufferBytes() const {
  int64_t total = 0;
  for (const auto& b : impl_->buckets) {
    if (b.scratch.defined()) total += static_cast<int64_t>(b.scratch.nbytes());
  }
  return total + impl_->hook->stateBytes();
}

int64_t DistributedDataParallel::gradientBytes() const {
  const Impl& s = *impl_;
  int64_t total = 0;
  for (const auto& b : s.buckets) {
    if (b.buffer.defined()) total += static_cast<int64_t>(b.buffer.nbytes());
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    const at::Tensor& grad = s.params[i].grad();
    if (!grad.defined()) continue;
    auto [b, slot] = s.reducer->slotOf(i);
    bool inBucket = !s.alone && grad.data_ptr() == s.buckets[b].gradients[slot].data_ptr();
    if (!inBucket) total += static_cast<int64_t>(grad.nbytes());
  }
  return total;
}
Communicator& DistributedDataParallel::comm() { return *impl_->comm; }
torch::nn::Module& DistributedDataParallel::module() { return *impl_->module; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucketLayout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& bucket : impl_->buckets) {
    layout.emplace_back();
    for (size_t p : bucket.params) layout.back().push_back(impl_->names[p]);
  }
  return layout;
}

}  // namespace lockstep

#include "lockstep/ddp/distributed_data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <numeric>

#include "ddp/bucket_plan.h"
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

struct DistributedDataParallel::Impl {
  struct Bucket {
    std::vector<size_t> params;  // indices into params
    std::vector<int64_t> offsets;
    at::Tensor buffer;
    at::Tensor scratch;
    std::vector<at::Tensor> gradients;  ///< aliases of buffer shaped like the parameters, one per slot (the .grad)
    int pending = 0;
    bool ready = false;
    WorkHandle work;
    std::chrono::steady_clock::time_point launched;
  };

  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Communicator> comm;
  DdpOptions options;
  std::shared_ptr<CommHook> hook;
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<std::pair<size_t, size_t>> slotOf;  // param -> (bucket, slot)
  std::vector<bool> arrived;
  std::vector<Bucket> buckets;
  /// Each parameter's AccumulateGrad node (the variable holds it weakly) and our post-hook on it.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> accumulators;
  size_t nextToLaunch = 0;
  bool alone = false;           ///< a world of one: no buckets are copied or communicated
  bool lendsGradients = false;  ///< the hook takes a lone parameter's gradient as its bucket
  bool anyArrived = false;
  bool syncEnabled = true;
  DdpStats stats;
  std::vector<BucketTiming> lastTimings;  // sized once, on the first sync

  /// Runs after autograd accumulated this step's gradient into .grad.
  void onGradient(size_t index) {
    if (!syncEnabled) return;
    if (arrived[index]) { throw Error(detail::arrivedTwiceError(names[index])); }
    arrived[index] = true;
    anyArrived = true;
    // One rank: the average is the gradient itself, already in .grad.
    if (alone) return;
    auto [b, slot] = slotOf[index];
    Bucket& bucket = buckets[b];
    // .grad holds what backward produced plus whatever it held before (noSync accumulation):
    // exactly what gets averaged.
    bindToBucket(bucket, slot, params[index]);
    if (--bucket.pending == 0) {
      bucket.ready = true;
      launchReady(/*duringBackward=*/true);
    }
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

  void launchReady(bool duringBackward) {
    // Strictly in bucket order, so every rank issues the same sequence.
    while (nextToLaunch < buckets.size() && buckets[nextToLaunch].ready) {
      Bucket& bucket = buckets[nextToLaunch];
      GradBucket view{static_cast<int>(nextToLaunch), &bucket.buffer, &bucket.scratch, &bucket.gradients};
      bucket.launched = std::chrono::steady_clock::now();
      bucket.work = hook->start(*comm, view);
      stats.bytesSent += view.bytesSent;
      ++stats.bucketsLaunched;
      if (duringBackward) ++stats.bucketsLaunchedDuringBackward;
      stats.bytesReduced += bucket.buffer.numel() * 4;
      ++nextToLaunch;
    }
  }

  void finish() {
    if (!syncEnabled) return;
    std::string message = detail::missingGradientsError(names, arrived, comm->rank(), anyArrived);
    if (!message.empty() && !options.findUnusedParameters) {
      reset();
      throw Error(message);
    }
    if (alone) {
      // Nothing to communicate; unused parameters get zeros, as they would with more ranks.
      for (size_t i = 0; i < params.size(); ++i) {
        if (!arrived[i] && !params[i].grad().defined()) params[i].mutable_grad() = at::zeros_like(params[i]);
      }
      lastTimings.clear();
      ++stats.syncs;
      reset();
      return;
    }
    // Unused parameters contribute what they accumulated locally (or zeros).
    for (size_t i = 0; i < params.size(); ++i) {
      if (arrived[i]) continue;
      auto [b, slot] = slotOf[i];
      Bucket& bucket = buckets[b];
      bindToBucket(bucket, slot, params[i]);
      if (--bucket.pending == 0) bucket.ready = true;
    }
    launchReady(/*duringBackward=*/false);
    LOCKSTEP_ASSERT(nextToLaunch == buckets.size(), "not every bucket was launched");
    lastTimings.resize(buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& bucket = buckets[b];
      bucket.work->wait();
      auto completed = bucket.work->completedAt();
      if (completed == std::chrono::steady_clock::time_point{}) completed = std::chrono::steady_clock::now();
      lastTimings[b] = BucketTiming{static_cast<int>(b), bucket.buffer.numel() * 4, bucket.launched, completed};
      GradBucket view{static_cast<int>(b), &bucket.buffer, &bucket.scratch, &bucket.gradients};
      hook->finish(*comm, view);  // the averages are now in the bucket, that is, in every .grad
      stats.bytesSent += view.bytesSent;
    }
    if (options.broadcastBuffers) {
      std::vector<at::Tensor> buffers;
      for (auto& b : module->buffers(true)) buffers.push_back(b.detach());
      if (!buffers.empty()) comm->broadcast(buffers, 0)->wait();
    }
    ++stats.syncs;
    reset();
  }

  void reset() {
    std::fill(arrived.begin(), arrived.end(), false);
    for (auto& bucket : buckets) {
      bucket.pending = static_cast<int>(bucket.params.size());
      bucket.ready = false;
      bucket.work.reset();
    }
    nextToLaunch = 0;
    anyArrived = false;
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<Communicator> comm, DdpOptions options)
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
    LOCKSTEP_CHECK(p.value().scalar_type() == at::kFloat && p.value().device().is_cpu(), "parameter '", p.key(),
                   "' is ", describeTensor(p.value()), " on ", p.value().device().str(),
                   "; DistributedDataParallel handles float32 CPU parameters");
    s.params.push_back(p.value());
    s.names.push_back(p.key());
  }
  if (options.checkConsistency) checkModuleConsistency(*s.module, *s.comm);
  broadcastModule(*s.module, *s.comm);

  // Buckets in reverse registration order: backward produces the last layers' gradients first.
  std::vector<int64_t> numels;
  for (const auto& p : s.params) numels.push_back(p.numel());
  s.slotOf.resize(s.params.size());
  for (auto& params : detail::planBuckets(numels, options)) {
    auto& bucket = s.buckets.emplace_back();
    int64_t offset = 0;
    for (size_t k : params) {
      s.slotOf[k] = {s.buckets.size() - 1, bucket.params.size()};
      bucket.params.push_back(k);
      bucket.offsets.push_back(offset);
      offset += numels[k];
    }
  }
  s.alone = s.comm->size() == 1;
  // A world of one communicates nothing: its gradients stay in .grad, so no
  // bucket copies are allocated (one float32 copy of the model saved).
  for (auto& bucket : s.buckets) {
    int64_t total = 0;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) total += s.params[bucket.params[slot]].numel();
    if (s.alone) continue;
    // Uninitialised: every slot is written (copied, zeroed, or lent) before its bucket is launched,
    // and a lent bucket's first buffer is never touched at all.
    bucket.buffer = at::empty({total}, at::kFloat);
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const at::Tensor& p = s.params[bucket.params[slot]];
      bucket.gradients.push_back(aliasOf(bucket.buffer.narrow(0, bucket.offsets[slot], p.numel()).view(p.sizes())));
    }
  }
  s.arrived.assign(s.params.size(), false);
  s.reset();

  // Post-hooks on the parameters' AccumulateGrad nodes run once autograd has accumulated the
  // step's gradient into .grad (in place when .grad is already the bucket's view).
  std::weak_ptr<Impl> weak = impl_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(s.params[i]);
    auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (auto impl = weak.lock()) impl->onGradient(i);
          return outputs;
        }));
    s.accumulators.emplace_back(std::move(accumulator), key);
  }
  log::debug(fmt::format("DDP: {} parameters in {} bucket(s) of <= {} MB, hook {}", s.params.size(), s.buckets.size(),
                         options.bucketCapMb, s.hook->name()));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& [accumulator, key] : impl_->accumulators) accumulator->del_post_hook(key);
}

void DistributedDataParallel::finishGradientSync() { impl_->finish(); }
void DistributedDataParallel::setSyncEnabled(bool enabled) { impl_->syncEnabled = enabled; }
bool DistributedDataParallel::syncEnabled() const { return impl_->syncEnabled; }
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
    auto [b, slot] = s.slotOf[i];
    bool inBucket = !s.alone && grad.data_ptr() == s.buckets[b].gradients[slot].data_ptr();
    if (!inBucket) total += static_cast<int64_t>(grad.nbytes());
  }
  return total;
}
const DdpStats& DistributedDataParallel::stats() const { return impl_->stats; }
const std::vector<BucketTiming>& DistributedDataParallel::lastSyncTimings() const { return impl_->lastTimings; }
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

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.syncEnabled()) {
  ddp_.setSyncEnabled(false);
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.setSyncEnabled(previous_); }

}  // namespace lockstep

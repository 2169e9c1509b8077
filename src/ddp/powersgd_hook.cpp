// PowerSGD as a DDP comm hook: low-rank gradient averaging with error feedback
// and warm start (comm_hook.h, docs/ddp.md "PowerSGD").
//
// Per bucket and step, once compressing:
//   start():  M += error (error feedback); error := M (the input, kept to
//             compute the next error); Q := orthogonalize(Q) (warm) or a fresh
//             random Q; P := M Q; allreduce-sum [uncompressed tensors | P].
//   finish(): uncompressed /= N; P := orthogonalize(P); Q := M^T P;
//             allreduce-sum Q (blocking); Q /= N; M := P Q^T; error -= M.
// P after its allreduce and Q after its own are the same on every rank, so
// every rank writes the same average M = P Q^T.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>

#include <optional>

#include "ddp/powersgd_hook.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

/// The same random stream on every rank for a bucket's step, made on first use (most steps need none).
class StepRandom {
 public:
  StepRandom(const PowerSgdOptions& options, int bucket, int64_t step)
      : seed_(options.seed + 1000003ULL * static_cast<uint64_t>(bucket) + static_cast<uint64_t>(step)) {}
  at::Generator& get() {
    if (!generator_) generator_ = at::detail::createCPUGenerator(seed_);
    return *generator_;
  }

 private:
  uint64_t seed_;
  std::optional<at::Generator> generator_;
};

/// Fills `t` with standard normal draws from `random`: drawn on the CPU and copied to where `t`
/// lives, so that every device gets the same numbers and a CUDA tensor never meets the CPU
/// generator.
void fillNormal(const at::Tensor& t, StepRandom& random) {
  if (t.is_cpu()) {
    t.normal_(0, 1, random.get());
  } else {
    t.copy_(at::empty(t.sizes(), t.options().device(at::kCPU)).normal_(0, 1, random.get()));
  }
}

/// Orthonormalises the columns of `matrix` (n x r, r <= n, r small) in place,
/// left to right, each projected off the earlier ones twice (Gram-Schmidt
/// "twice is enough"). A column left with less than kDependent of its norm lies
/// in the earlier columns' span (a gradient of rank below r): it becomes a
/// fresh random direction from `refill` when given (Q: so that a warm start
/// never loses rank for good), else zeros (P: it carries nothing) — never
/// rounding noise blown up to unit length, which is not orthogonal to the rest.
void orthogonalize(const at::Tensor& matrix, StepRandom* refill) {
  constexpr double kDependent = 1e-4;
  const int64_t columns = matrix.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    at::Tensor column = matrix.narrow(1, i, 1);
    const at::Tensor done = matrix.narrow(1, 0, i);
    auto projectOff = [&] {
      for (int pass = 0; pass < 2 && i > 0; ++pass) column.sub_(done.mm(done.t().mm(column)));
    };
    double before = column.norm().item<double>();
    projectOff();
    double norm = column.norm().item<double>();
    if (!(norm > kDependent * before) && refill != nullptr) {
      fillNormal(column, *refill);
      before = column.norm().item<double>();
      projectOff();
      norm = column.norm().item<double>();
    }
    if (norm > kDependent * before) {
      column.div_(norm);
    } else {
      column.zero_();
    }
  }
}

}  // namespace

PowerSgdHook::PowerSgdHook(PowerSgdOptions options) : options_(options) { validatePowerSgdOptions(options_); }

std::string PowerSgdHook::name() const { return fmt::format("powersgd_rank{}", options_.rank); }

PowerSgdHook::BucketState& PowerSgdHook::stateOf(const GradBucket& bucket) {
  LOCKSTEP_ASSERT(bucket.gradients != nullptr && bucket.index >= 0, "PowerSGD needs the bucket's gradient views");
  if (static_cast<size_t>(bucket.index) >= buckets_.size()) buckets_.resize(bucket.index + 1);
  BucketState& s = buckets_[bucket.index];
  if (s.planned) return s;
  const auto& grads = *bucket.gradients;
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i];
    if (g.dim() >= 2 && g.numel() > 0) {
      const int64_t n = g.size(0);
      const int64_t m = g.numel() / n;
      const int64_t r = std::min<int64_t>({n, m, options_.rank});
      if (static_cast<double>((n + m) * r) * options_.minCompressionRate < static_cast<double>(n * m)) {
        s.matrices.push_back(Matrix{i, n, m, r, s.pNumel, s.qNumel, s.errorNumel, {}, {}, {}, {}});
        s.pNumel += n * r;
        s.qNumel += m * r;
        s.errorNumel += n * m;
        continue;
      }
    }
    s.plain.push_back(i);
    s.plainNumel += g.numel();
  }
  s.planned = true;
  restore(bucket.index, s);
  return s;
}

void PowerSgdHook::prepare(BucketState& s, const std::vector<at::Tensor>& grads) {
  const auto on = at::TensorOptions().dtype(at::kFloat).device(grads.front().device());
  // Else restored from a checkpoint, on the CPU: moved to the gradients' device.
  s.q = s.q.defined() ? s.q.to(on.device()) : at::empty({s.qNumel}, on);
  if (options_.errorFeedback) s.error = s.error.defined() ? s.error.to(on.device()) : at::zeros({s.errorNumel}, on);
  s.pack = at::empty({s.plainNumel + s.pNumel}, on);
  for (Matrix& k : s.matrices) {
    k.grad = grads[k.index].view({k.n, k.m});
    k.p = s.pack.narrow(0, s.plainNumel + k.pOffset, k.n * k.r).view({k.n, k.r});
    k.q = s.q.narrow(0, k.qOffset, k.m * k.r).view({k.m, k.r});
    if (options_.errorFeedback) k.error = s.error.narrow(0, k.errorOffset, k.n * k.m).view({k.n, k.m});
  }
  s.prepared = true;
}

WorkHandle PowerSgdHook::start(Communicator& comm, GradBucket& bucket) {
  BucketState& s = stateOf(bucket);
  s.compressing = s.steps >= options_.startStep && !s.matrices.empty();
  if (!s.compressing) {
    bucket.bytesSent += bucket.buffer->numel() * 4;
    std::vector<at::Tensor> tensors{*bucket.buffer};
    return comm.allreduce(tensors, ReduceOp::kAvg);
  }
  const auto& grads = *bucket.gradients;
  StepRandom random(options_, bucket.index, s.steps);
  const bool fresh = !s.q.defined() || !options_.warmStart;
  if (!s.prepared) prepare(s, grads);
  if (fresh) fillNormal(s.q, random);
  int64_t offset = 0;
  for (size_t i : s.plain) {
    s.pack.narrow(0, offset, grads[i].numel()).copy_(grads[i].reshape({-1}));
    offset += grads[i].numel();
  }
  for (Matrix& k : s.matrices) {
    if (options_.errorFeedback) {
      k.grad.add_(k.error);
      k.error.copy_(k.grad);
    }
    orthogonalize(k.q, &random);
    at::mm_out(k.p, k.grad, k.q);
  }
  bucket.bytesSent += s.pack.numel() * 4;
  std::vector<at::Tensor> tensors{s.pack};
  return comm.allreduce(tensors, ReduceOp::kSum);
}

void PowerSgdHook::finish(Communicator& comm, GradBucket& bucket) {
  BucketState& s = buckets_.at(bucket.index);
  ++s.steps;
  if (!s.compressing) return;
  const auto& grads = *bucket.gradients;
  const double world = comm.size();
  int64_t offset = 0;
  for (size_t i : s.plain) {
    at::Tensor average = grads[i];  // a view of the bucket
    at::div_out(average, s.pack.narrow(0, offset, grads[i].numel()).view(grads[i].sizes()), world);
    offset += grads[i].numel();
  }
  for (Matrix& k : s.matrices) {
    orthogonalize(k.p, nullptr);
    at::mm_out(k.q, k.grad.t(), k.p);
  }
  bucket.bytesSent += s.q.numel() * 4;
  std::vector<at::Tensor> tensors{s.q};
  comm.allreduce(tensors, ReduceOp::kSum)->waitOnStream();
  s.q.div_(world);
  for (Matrix& k : s.matrices) {
    at::mm_out(k.grad, k.p, k.q.t());
    if (options_.errorFeedback) k.error.sub_(k.grad);
  }
}

int64_t PowerSgdHook::stateBytes() const {
  int64_t total = 0;
  for (const auto& s : buckets_) {
    for (const at::Tensor* t : {&s.q, &s.error, &s.pack}) {
      if (t->defined()) total += static_cast<int64_t>(t->nbytes());
    }
  }
  return total;
}

}  // namespace lockstep::detail

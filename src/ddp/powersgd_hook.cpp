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

#include "ddp/powersgd_hook.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

/// Orthonormalises the columns of `matrix` (n x r, r <= n, r small) in place,
/// left to right, each projected off the earlier ones twice (Gram-Schmidt
/// "twice is enough"). A column left with less than kDependent of its norm lies
/// in the earlier columns' span (a gradient of rank below r): it becomes a
/// fresh random direction from `refill` when given (Q: so that a warm start
/// never loses rank for good), else zeros (P: it carries nothing) — never
/// rounding noise blown up to unit length, which is not orthogonal to the rest.
void orthogonalize(const at::Tensor& matrix, at::Generator* refill) {
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
      column.copy_(at::randn({column.size(0), 1}, *refill, at::kFloat));
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

/// The same random stream on every rank for a bucket's step.
at::Generator generatorFor(const PowerSgdOptions& options, int bucket, int64_t step) {
  return at::detail::createCPUGenerator(options.seed + 1000003ULL * static_cast<uint64_t>(bucket) +
                                        static_cast<uint64_t>(step));
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
        s.matrices.push_back(Matrix{i, n, m, r, s.pNumel, s.qNumel, s.errorNumel});
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

WorkHandle PowerSgdHook::start(Communicator& comm, GradBucket& bucket) {
  BucketState& s = stateOf(bucket);
  s.compressing = s.steps >= options_.startStep && !s.matrices.empty();
  if (!s.compressing) {
    bucket.bytesSent += bucket.buffer->numel() * 4;
    std::vector<at::Tensor> tensors{*bucket.buffer};
    return comm.allreduce(tensors, ReduceOp::kAvg);
  }
  const auto& grads = *bucket.gradients;
  at::Generator generator = generatorFor(options_, bucket.index, s.steps);
  if (!s.q.defined() || !options_.warmStart) s.q = at::randn({s.qNumel}, generator, at::kFloat);
  if (!s.pack.defined()) s.pack = at::empty({s.plainNumel + s.pNumel}, at::kFloat);
  if (options_.errorFeedback && !s.error.defined()) s.error = at::zeros({s.errorNumel}, at::kFloat);
  int64_t offset = 0;
  for (size_t i : s.plain) {
    s.pack.narrow(0, offset, grads[i].numel()).copy_(grads[i].reshape({-1}));
    offset += grads[i].numel();
  }
  for (const Matrix& k : s.matrices) {
    at::Tensor m = grads[k.index].view({k.n, k.m});
    if (options_.errorFeedback) {
      at::Tensor error = s.error.narrow(0, k.errorOffset, k.n * k.m).view({k.n, k.m});
      m.add_(error);
      error.copy_(m);
    }
    at::Tensor q = s.q.narrow(0, k.qOffset, k.m * k.r).view({k.m, k.r});
    orthogonalize(q, &generator);
    at::Tensor p = s.pack.narrow(0, s.plainNumel + k.pOffset, k.n * k.r).view({k.n, k.r});
    at::mm_out(p, m, q);
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
  for (const Matrix& k : s.matrices) {
    at::Tensor p = s.pack.narrow(0, s.plainNumel + k.pOffset, k.n * k.r).view({k.n, k.r});
    orthogonalize(p, nullptr);
    at::Tensor q = s.q.narrow(0, k.qOffset, k.m * k.r).view({k.m, k.r});
    at::mm_out(q, grads[k.index].view({k.n, k.m}).t(), p);
  }
  bucket.bytesSent += s.q.numel() * 4;
  std::vector<at::Tensor> tensors{s.q};
  comm.allreduce(tensors, ReduceOp::kSum)->wait();
  s.q.div_(world);
  for (const Matrix& k : s.matrices) {
    at::Tensor m = grads[k.index].view({k.n, k.m});
    at::Tensor p = s.pack.narrow(0, s.plainNumel + k.pOffset, k.n * k.r).view({k.n, k.r});
    at::Tensor q = s.q.narrow(0, k.qOffset, k.m * k.r).view({k.m, k.r});
    at::mm_out(m, p, q.t());
    if (options_.errorFeedback) s.error.narrow(0, k.errorOffset, k.n * k.m).view({k.n, k.m}).sub_(m);
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

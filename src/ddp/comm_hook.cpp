#include "lockstep/ddp/comm_hook.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include "ddp/powersgd_hook.h"
#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {
constexpr EnumName<GradCompression> kCompressionNames[] = {{GradCompression::kNone, "none"},
                                                           {GradCompression::kFp16, "fp16"},
                                                           {GradCompression::kBf16, "bf16"},
                                                           {GradCompression::kPowerSgd, "powersgd"}};
}  // namespace

const char* toString(GradCompression c) { return enumName(kCompressionNames, c); }

GradCompression parseGradCompression(const std::string& text, const std::string& what) {
  return parseEnum(kCompressionNames, text, what);
}

namespace {

class AllreduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  bool acceptsLentGradients() const override { return true; }
  WorkHandle start(Communicator& comm, GradBucket& bucket) override {
    bucket.bytesSent += bucket.buffer->numel() * 4;
    std::vector<at::Tensor> tensors{*bucket.buffer};
    return comm.allreduce(tensors, ReduceOp::kAvg);
  }
  void finish(Communicator&, GradBucket&) override {}
};

/// Divides by the world size before compressing (so sums of large gradients
/// stay in range, as PyTorch's fp16 hook does), sums in 2-byte floats on the
/// wire, and decompresses into the float32 bucket.
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(at::ScalarType dtype) : dtype_(dtype) {}
  std::string name() const override { return dtype_ == at::kHalf ? "fp16_compress" : "bf16_compress"; }
  bool acceptsLentGradients() const override { return true; }
  WorkHandle start(Communicator& comm, GradBucket& bucket) override {
    *bucket.scratch = bucket.buffer->div(comm.size()).to(dtype_);
    bucket.bytesSent += bucket.scratch->numel() * 2;
    std::vector<at::Tensor> tensors{*bucket.scratch};
    return comm.allreduce(tensors, ReduceOp::kSum);
  }
  void finish(Communicator&, GradBucket& bucket) override { bucket.buffer->copy_(*bucket.scratch); }

 private:
  at::ScalarType dtype_;
};

}  // namespace

void validatePowerSgdOptions(const PowerSgdOptions& o) {
  if (o.rank < 1) throw ConfigError(fmt::format("ddp.powersgd_rank must be at least 1, got {}", o.rank));
  if (o.startStep < 0) {
    throw ConfigError(
        fmt::format("ddp.powersgd_start_step must be 0 or more (synchronised steps of plain allreduce), "
                    "got {}",
                    o.startStep));
  }
  if (!(o.minCompressionRate >= 0)) {
    throw ConfigError(fmt::format("ddp.powersgd_min_compression_rate must be 0 or more, got {}", o.minCompressionRate));
  }
}

std::shared_ptr<CommHook> makeCommHook(GradCompression compression, const PowerSgdOptions& powerSgd) {
  switch (compression) {
    case GradCompression::kPowerSgd: return std::make_shared<detail::PowerSgdHook>(powerSgd);
    case GradCompression::kNone: return std::make_shared<AllreduceHook>();
    case GradCompression::kFp16: return std::make_shared<CompressHook>(at::kHalf);
    case GradCompression::kBf16: return std::make_shared<CompressHook>(at::kBFloat16);
  }
  return std::make_shared<AllreduceHook>();
}

}  // namespace lockstep

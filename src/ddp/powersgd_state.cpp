// PowerSGD's checkpoint entries: per bucket the step count and Q (the same on
// every rank) and every rank's error feedback (powersgd_hook.h).
#include <ATen/ATen.h>

#include <fmt/format.h>

#include "ddp/powersgd_hook.h"
#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_archive.h"

namespace lockstep::detail {

namespace {

constexpr int kErrorTag = 7401;
constexpr int kWriter = 0;
const std::string kBucketsKey = "powersgd/buckets";

std::string prefixOf(size_t bucket) { return fmt::format("powersgd/bucket{:04}/", bucket); }

}  // namespace

void PowerSgdHook::saveState(const std::shared_ptr<Communicator>& comm, TensorArchive* archive) {
  const int world = comm->size();
  if (comm->rank() != kWriter) {
    LOCKSTEP_CHECK(archive == nullptr, "PowerSGD saveState: rank ", comm->rank(),
                   " was given an archive; only rank 0 writes the checkpoint");
    std::vector<WorkHandle> sends;  // in the writer's key order: bucket by bucket
    for (const auto& s : buckets_) {
      if (s.error.defined()) sends.push_back(comm->send(s.error, kWriter, kErrorTag));
    }
    for (auto& work : sends) work->wait();
    return;
  }
  LOCKSTEP_CHECK(archive != nullptr, "PowerSGD saveState: rank 0 writes the checkpoint and needs an archive");
  archive->putInt(kBucketsKey, static_cast<int64_t>(buckets_.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketState& s = buckets_[b];
    const std::string prefix = prefixOf(b);
    archive->putInt(prefix + "steps", s.steps);
    if (s.q.defined()) archive->putTensor(prefix + "q", s.q);
    if (!s.error.defined()) continue;
    AssembledTensor whole{at::kFloat, {world, s.errorNumel}, {}};
    for (int r = 0; r < world; ++r) {
      whole.parts.push_back({r, r * s.errorNumel, s.errorNumel, r == kWriter ? s.error : at::Tensor()});
    }
    putAssembledTensor(*archive, prefix + "error", std::move(whole), comm, kErrorTag);
  }
}

void PowerSgdHook::loadState(const TensorArchive& archive, int rank, int world, bool report) {
  report_ = report;
  restored_.clear();
  if (!archive.contains(kBucketsKey)) {
    if (report) {
      log::warn(
          fmt::format("{} holds no PowerSGD state (written without ddp.compression powersgd): compression "
                      "starts over, with plain allreduce for the first {} synchronised step(s)",
                      archive.label(), options_.startStep));
    }
    return;
  }
  bool errorsDropped = false;
  const int64_t buckets = archive.getInt(kBucketsKey);
  for (int64_t b = 0; b < buckets; ++b) {
    const std::string prefix = prefixOf(static_cast<size_t>(b));
    Restored r;
    r.steps = archive.getInt(prefix + "steps");
    if (archive.contains(prefix + "q")) r.q = archive.getTensor(prefix + "q").clone();
    if (archive.contains(prefix + "error")) {
      at::Tensor all = archive.getTensor(prefix + "error");
      if (all.dim() == 2 && all.size(0) == world) {
        r.error = all[rank].clone();
      } else {
        errorsDropped = true;
      }
    }
    restored_.push_back(std::move(r));
  }
  if (errorsDropped && report) {
    log::warn(
        fmt::format("{}: PowerSGD's error feedback was saved by another number of workers; it starts from zero "
                    "on these {}",
                    archive.label(), world));
  }
}

void PowerSgdHook::restore(int index, BucketState& s) {
  if (static_cast<size_t>(index) >= restored_.size()) return;
  Restored& r = restored_[index];
  const bool fits =
      (!r.q.defined() || r.q.numel() == s.qNumel) && (!r.error.defined() || r.error.numel() == s.errorNumel);
  if (!fits) {
    if (report_) {
      log::warn(
          fmt::format("PowerSGD: bucket {} is not laid out as in the checkpoint (ddp.bucket_cap_mb or the model "
                      "changed); its compression starts over",
                      index));
    }
    r = Restored{};
    return;
  }
  s.steps = r.steps;
  s.q = r.q;
  s.error = r.error;
  r = Restored{};
}

}  // namespace lockstep::detail

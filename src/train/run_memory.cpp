// run_memory.cpp — src/train/run_memory.h.
#include "train/run_memory.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "lockstep/common/cuda_memory.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_memory.h"

namespace lockstep::detail {

void RunMemory::beginCompute() {
  if (cudaDevice_ >= 0) {
    tracking_ = true;
    liveAtStart_ = cudaAllocatedBytes(cudaDevice_);
    resetCudaPeak(cudaDevice_);
    return;
  }
  tracking_ = tensorMemoryTracked();
  if (!tracking_) return;
  liveAtStart_ = liveTensorBytes();
  resetPeakTensorBytes();
}

void RunMemory::endCompute() {
  if (!tracking_) return;
  const int64_t peak = cudaDevice_ >= 0 ? cudaPeakAllocatedBytes(cudaDevice_) : peakTensorBytes();
  stepPeakBytes_ = std::max(stepPeakBytes_, peak - liveAtStart_);
}

int64_t RunMemory::deviceStepPeak() const { return cudaDevice_ >= 0 ? cudaPeakAllocatedBytes(cudaDevice_) : -1; }

std::string RunMemory::whileSaving(const std::function<void()>& save) {
  // The peak resident set while saving, apart from training's (which it must not raise much):
  // VmHWM is reset before and after each save, so it measures training and saving separately.
  trainingPeakRss_ = std::max(trainingPeakRss_, peakResidentBytes());
  peakRss_ = std::max(peakRss_, trainingPeakRss_);
  const bool separate = resetPeakResidentBytes();
  save();
  const int64_t peakSaving = peakResidentBytes();
  peakRss_ = std::max(peakRss_, peakSaving);
  if (!separate) return "";
  resetPeakResidentBytes();
  return fmt::format("; peak RSS while saving {:.0f} MB, training's {:.0f} MB", peakSaving / 1e6,
                     trainingPeakRss_ / 1e6);
}

std::vector<RankMemory> RunMemory::gather(Communicator& comm, RankMemory mine, bool report) const {
  static constexpr int64_t RankMemory::*kFields[] = {&RankMemory::parameterBytes,     &RankMemory::gradientBytes,
                                                     &RankMemory::optimizerBytes,     &RankMemory::commBufferBytes,
                                                     &RankMemory::stepPeakBytes,      &RankMemory::peakRssBytes,
                                                     &RankMemory::activationPeakBytes};
  constexpr int64_t n = std::size(kFields);
  const int world = comm.size();
  mine.stepPeakBytes = stepPeakBytes_;
  mine.peakRssBytes = std::max(peakRss_, peakResidentBytes());
  at::Tensor local = at::empty({n}, at::kLong);
  at::Tensor all = at::empty({world * n}, at::kLong);
  for (int64_t f = 0; f < n; ++f) local[f] = mine.*kFields[f];
  comm.allgather(local, all)->wait();
  auto a = all.accessor<int64_t, 1>();
  std::vector<RankMemory> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    RankMemory& m = ranks[static_cast<size_t>(r)];
    m.rank = r;
    for (int64_t f = 0; f < n; ++f) m.*kFields[f] = a[r * n + f];
  }
  if (report) {
    const RankMemory& m = ranks[0];
    log::info(
        fmt::format("memory (rank 0): model state {:.1f} MB = parameters {:.1f} + gradients {:.1f} + optimizer "
                    "{:.1f}; communication buffers {:.1f} MB{}; peak RSS {:.0f} MB",
                    m.modelStateBytes() / 1e6, m.parameterBytes / 1e6, m.gradientBytes / 1e6, m.optimizerBytes / 1e6,
                    m.commBufferBytes / 1e6,
                    m.stepPeakBytes >= 0 ? fmt::format("; forward+backward peak {:.1f} MB", m.stepPeakBytes / 1e6) : "",
                    m.peakRssBytes / 1e6));
  }
  return ranks;
}

}  // namespace lockstep::detail

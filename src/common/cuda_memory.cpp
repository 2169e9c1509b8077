// LibTorch's CUDA caching allocator's counters (common/cuda_memory.h).
#include "lockstep/common/cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace lockstep {

namespace {

constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

c10::CachingDeviceAllocator::DeviceStats statsOf(int device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace

int64_t cudaAllocatedBytes(int device) { return statsOf(device).allocated_bytes[kAll].current; }
int64_t cudaPeakAllocatedBytes(int device) { return statsOf(device).allocated_bytes[kAll].peak; }
void resetCudaPeak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace lockstep

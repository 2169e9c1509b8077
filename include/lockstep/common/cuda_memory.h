// lockstep/common/cuda_memory.h — what LibTorch's CUDA caching allocator holds on one GPU.
//
// The allocator's own counters (c10's DeviceStats, the figures of PyTorch's
// torch.cuda.memory_allocated / max_memory_allocated): bytes of live tensor
// blocks on the device and their peak since the last reset. Cached but free
// blocks do not count (they are "reserved"). Calls for a device the process
// never allocated on answer 0.
#pragma once

#include <cstdint>

namespace lockstep {

/// Bytes of tensors the CUDA caching allocator holds on cuda:`device` now.
int64_t cudaAllocatedBytes(int device);
/// The highest cudaAllocatedBytes(device) since the process began or the last reset.
int64_t cudaPeakAllocatedBytes(int device);
/// Sets the peaks of cuda:`device` to the current figures.
void resetCudaPeak(int device);

}  // namespace lockstep

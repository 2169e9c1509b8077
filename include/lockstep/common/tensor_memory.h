// lockstep/common/tensor_memory.h — how many bytes CPU tensors hold, and the peak.
//
//   lockstep::trackTensorMemory();            // once, early: installs the counting allocator
//   lockstep::resetPeakTensorBytes();
//   ... forward, backward ...
//   int64_t activations = lockstep::peakTensorBytes() - bytesBefore;
//
// trackTensorMemory() installs a CPU allocator (c10::SetCPUAllocator) that
// allocates with LibTorch's alloc_cpu (64-byte aligned; not reported to
// LibTorch's own memory profiler) with a small
// header recording the size, and keeps two process-wide atomic counters:
// live bytes and their peak since the last reset. Only tensor storage
// allocated after the call is counted (storage allocated before is freed by
// its own deleter, uncounted); memory that BLAS, oneDNN or the allocator of
// the C library hand out directly is not tensor storage and is not counted
// (peak RSS, monitor/system_stats.h, sees it). The counters are process-wide:
// every thread's tensors count (a loader thread's batches, other ranks when
// ranks are threads), and a reset is seen by all. Thread-safe; installing twice
// is a no-op. There is no uninstall: tensors may outlive any scope.
//
// The allocator also keeps freed blocks of 64 KiB and more (capacity rounded up
// to whole pages) for the next tensor of the same capacity, up to a limit
// (LOCKSTEP_CPU_CACHE_MB, default 1024; 0 keeps none), giving the oldest back
// first. A training step allocates the same sizes every step, and without the
// cache every large one is fresh memory from the kernel, zeroed page by page
// (glibc maps blocks of 32 MB and more anew each time and returns freed heap
// at its top), so a large model without the cache takes fresh pages, and their
// faults, every step (docs/performance.md, "Reusing freed tensor memory"). Cached blocks count as resident memory, not
// as live tensor bytes.
#pragma once

#include <cstdint>

namespace lockstep {

void trackTensorMemory();
bool tensorMemoryTracked();
/// Bytes of tensor storage allocated since trackTensorMemory() and not yet freed.
int64_t liveTensorBytes();
/// The highest liveTensorBytes() since tracking began or the last reset.
int64_t peakTensorBytes();
/// Sets the peak to the current live bytes.
void resetPeakTensorBytes();
/// How many bytes of freed blocks the allocator keeps (gives back the oldest beyond it; 0: none).
void setTensorCacheLimit(int64_t bytes);
/// Bytes of freed blocks the allocator keeps now.
int64_t cachedTensorBytes();

/// This process's peak resident set size (VmHWM of /proc/self/status); 0 where unreadable.
int64_t peakResidentBytes();
/// Starts a new peak: VmHWM becomes the current resident size (Linux's /proc/self/clear_refs "5").
/// Returns false where the kernel does not allow it (the peak then keeps counting from the start).
bool resetPeakResidentBytes();

}  // namespace lockstep

// The counting CPU allocator of common/tensor_memory.h. The size lives in a
// header in front of the data so that data and context are one pointer, as
// Allocator::raw_allocate requires of CPU allocators.
#include "lockstep/common/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include "lockstep/common/env.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace lockstep {

namespace {

constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned, as alloc_cpu's is
// Blocks from this size up are cached when freed; their capacity is rounded up to whole pages.
constexpr size_t kCachedFrom = size_t{1} << 16;
constexpr size_t kPage = 4096;
constexpr int64_t kDefaultCpuCacheMb = 1024;

/// Freed blocks kept for the next allocation of the same capacity, the oldest
/// given back to the C library first when more than the limit is kept. A
/// training step allocates the same sizes every step: taking them from here
/// spares the kernel's fresh zeroed pages (glibc maps blocks of 32 MB and up
/// anew each time, and gives smaller ones back when the heap's top is free).
class BlockCache {
 public:
  /// A cached block of `capacity` bytes, or null.
  void* take(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = bySize_.find(capacity);
    if (it == bySize_.end()) return nullptr;  // no entry is kept empty
    auto block = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) bySize_.erase(it);
    void* base = block->base;
    cached_ -= capacity;
    lru_.erase(block);
    return base;
  }
  /// Keeps `base`; false (the caller frees it) when it alone exceeds the limit.
  bool put(void* base, size_t capacity) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capacity > limit_) return false;
      lru_.push_back({base, capacity});
      bySize_[capacity].push_back(std::prev(lru_.end()));
      cached_ += capacity;
      while (cached_ > limit_) evicted.push_back(evictOldestLocked());
    }
    for (void* block : evicted) c10::free_cpu(block);
    return true;
  }
  void setLimit(size_t limit) {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = limit;
      while (cached_ > limit_) evicted.push_back(evictOldestLocked());
    }
    for (void* block : evicted) c10::free_cpu(block);
  }
  size_t cachedBytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }

 private:
  struct Block {
    void* base;
    size_t capacity;
  };
  void* evictOldestLocked() {
    Block oldest = lru_.front();
    auto sizeEntry = bySize_.find(oldest.capacity);
    auto& same = sizeEntry->second;  // the oldest of a size is first: blocks are added at the back
    same.erase(std::find(same.begin(), same.end(), lru_.begin()));
    if (same.empty()) bySize_.erase(sizeEntry);
    lru_.pop_front();
    cached_ -= oldest.capacity;
    return oldest.base;
  }

  std::mutex mutex_;
  std::list<Block> lru_;  ///< oldest first
  std::unordered_map<size_t, std::vector<std::list<Block>::iterator>> bySize_;
  size_t cached_ = 0;
  size_t limit_ = size_t{1} << 30;
};

BlockCache& blockCache() {
  static auto* cache = new BlockCache;  // leaked: tensors may be freed during static destruction
  return *cache;
}

std::atomic<int64_t> gLive{0};
std::atomic<int64_t> gPeak{0};
std::atomic<bool> gInstalled{false};

void count(int64_t delta) {
  const int64_t now = gLive.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = gPeak.load(std::memory_order_relaxed);
  while (now > peak && !gPeak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

// The header: the tensor's bytes, then the block's capacity (header included).
size_t* headerOf(void* base) { return static_cast<size_t*>(base); }

void release(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  count(-static_cast<int64_t>(headerOf(base)[0]));
  const size_t capacity = headerOf(base)[1];
  if (capacity >= kCachedFrom && blockCache().put(base, capacity)) return;
  c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    size_t capacity = nbytes + kHeader;
    void* cached = nullptr;
    if (capacity >= kCachedFrom) {
      capacity = (capacity + kPage - 1) / kPage * kPage;
      cached = blockCache().take(capacity);
    }
    char* base = static_cast<char*>(cached ? cached : c10::alloc_cpu(capacity));
    headerOf(base)[0] = nbytes;
    headerOf(base)[1] = capacity;
    count(static_cast<int64_t>(nbytes));
    void* data = base + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

void trackTensorMemory() {
  // Leaked on purpose: c10 keeps the pointer, and tensors may be freed during static destruction.
  static auto* allocator = new CountingAllocator;
  static std::once_flag once;
  std::call_once(once, [] {
    const int64_t megabytes =
        Environment::fromProcess().getInt(env::kCpuCacheMb, 0, int64_t{1} << 30).value_or(kDefaultCpuCacheMb);
    blockCache().setLimit(static_cast<size_t>(megabytes) << 20);
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    gInstalled = true;
  });
}

void setTensorCacheLimit(int64_t bytes) { blockCache().setLimit(static_cast<size_t>(std::max<int64_t>(bytes, 0))); }
int64_t cachedTensorBytes() { return static_cast<int64_t>(blockCache().cachedBytes()); }

bool tensorMemoryTracked() { return gInstalled.load(); }
int64_t liveTensorBytes() { return gLive.load(std::memory_order_relaxed); }
int64_t peakTensorBytes() { return gPeak.load(std::memory_order_relaxed); }
void resetPeakTensorBytes() { gPeak.store(gLive.load(std::memory_order_relaxed), std::memory_order_relaxed); }

int64_t peakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      int64_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

bool resetPeakResidentBytes() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

}  // namespace lockstep

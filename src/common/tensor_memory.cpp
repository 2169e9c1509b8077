// The counting CPU allocator of common/tensor_memory.h. The size lives in a
// header in front of the data so that data and context are one pointer, as
// Allocator::raw_allocate requires of CPU allocators.
#include "lockstep/common/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

namespace lockstep {

namespace {

constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned, as alloc_cpu's is

std::atomic<int64_t> gLive{0};
std::atomic<int64_t> gPeak{0};
std::atomic<bool> gInstalled{false};

void count(int64_t delta) {
  const int64_t now = gLive.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = gPeak.load(std::memory_order_relaxed);
  while (now > peak && !gPeak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

void release(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  count(-static_cast<int64_t>(*reinterpret_cast<size_t*>(base)));
  c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) const override {
    char* base = static_cast<char*>(c10::alloc_cpu(nbytes + kHeader));
    *reinterpret_cast<size_t*>(base) = nbytes;
    count(static_cast<int64_t>(nbytes));
    void* data = base + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

}  // namespace

void trackTensorMemory() {
  // Leaked on purpose: c10 keeps the pointer, and tensors may be freed during static destruction.
  static auto* allocator = new CountingAllocator;
  static std::once_flag once;
  std::call_once(once, [] {
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    gInstalled = true;
  });
}

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

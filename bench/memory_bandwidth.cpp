// memory_bandwidth.cpp — what one core of this machine copies and adds, the
// ceiling an allreduce between processes of one host is measured against
// (docs/performance.md), and what a fresh page costs. Copies a 32 MiB float
// array into another and adds one 32 MiB array into another, 20 times each,
// and prints the best of each in GB/s (bytes read + written over seconds, as
// STREAM counts them). Then maps 64 MiB of fresh anonymous memory, writes one
// byte of each 4 KiB page (the kernel zeroes each page on its first touch) and
// unmaps it, 5 times, and prints the median microseconds per page: the price
// an allocator pays for every page it takes new from the kernel.
//
//   build/bench/memory_bandwidth [MIB]   (default 32)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double freshPageMicroseconds() {
  const size_t bytes = size_t{64} << 20, page = 4096;
  std::vector<double> times;
  for (int round = 0; round < 5; ++round) {
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return -1;
    auto* p = static_cast<volatile char*>(map);
    auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < bytes; off += page) p[off] = 1;
    auto t1 = std::chrono::steady_clock::now();
    munmap(map, bytes);
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(bytes / page));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 32;
  const size_t n = mib * (1 << 20) / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  double bestCopy = 1e30, bestAdd = 1e30;
  for (int round = 0; round < 20; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(a.data(), b.data(), n * sizeof(float));
    auto t1 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
    auto t2 = std::chrono::steady_clock::now();
    bestCopy = std::min(bestCopy, std::chrono::duration<double>(t1 - t0).count());
    bestAdd = std::min(bestAdd, std::chrono::duration<double>(t2 - t1).count());
  }
  const double bytes = static_cast<double>(n * sizeof(float));
  std::printf("%zu MiB, best of 20, one core: copy %.1f GB/s, add %.1f GB/s, fresh page %.2f us (checksum %g)\n", mib,
              2 * bytes / bestCopy / 1e9, 3 * bytes / bestAdd / 1e9, freshPageMicroseconds(),
              static_cast<double>(a[n / 2]));
  return 0;
}

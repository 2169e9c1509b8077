// memory_bandwidth.cpp — what one core of this machine copies and adds, the
// ceiling an allreduce between processes of one host is measured against
// (docs/performance.md). Copies a 32 MiB float array into another and adds
// one 32 MiB array into another, 20 times each, and prints the best of each in
// GB/s (bytes read + written over seconds, as STREAM counts them).
//
//   build/bench/memory_bandwidth [MIB]   (default 32)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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
  std::printf("%zu MiB, best of 20, one core: copy %.1f GB/s, add %.1f GB/s (checksum %g)\n", mib,
              2 * bytes / bestCopy / 1e9, 3 * bytes / bestAdd / 1e9, static_cast<double>(a[n / 2]));
  return 0;
}

// raw_gloo_allreduce.cpp — the floor under lockstep's Gloo communicator: the
// same allreduce loop as `lockstep bench allreduce`, calling c10d's
// ProcessGroupGloo directly (no op queue, no stall inspector, no desync check).
// Same options as lockstep's Gloo backend on one host: one Gloo thread, the
// loopback device, float32 sum, 3 warm-up iterations, then the mean over the
// timed iterations of the slowest rank. Run it under `lockstep run`, which
// gives it rank, world and a fresh port (used to name the rendezvous file):
//
//   lockstep run -np 2 --threads 1 --no-prefix -- build/bench/raw_gloo_allreduce 4K,1M [ITERS]
//
// Lines: "  BYTES COUNT ITERS TIME_US ALGBW BUSBW n/a", as `lockstep bench allreduce` prints
// them, so bench/raw_gloo_vs_lockstep.sh reads both alike.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

int envInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    std::cerr << "raw_gloo_allreduce: " << name << " is not set; start it under `lockstep run`\n";
    std::exit(2);
  }
  return std::atoi(v);
}

int64_t parseSize(const std::string& s) {
  int64_t n = std::stoll(s);
  char unit = s.empty() ? ' ' : s.back();
  if (unit == 'K' || unit == 'k') return n << 10;
  if (unit == 'M' || unit == 'm') return n << 20;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: raw_gloo_allreduce SIZES[,..] [ITERS]   (under lockstep run)\n";
    return 2;
  }
  const int rank = envInt("LOCKSTEP_RANK"), world = envInt("LOCKSTEP_WORLD_SIZE");
  const int port = envInt("LOCKSTEP_MASTER_PORT");
  at::set_num_threads(1);
  auto store = c10::make_intrusive<c10d::FileStore>(fmt::format("/tmp/raw-gloo-{}", port), world);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  c10d::ProcessGroupGloo group(store, rank, world, options);
  std::vector<int64_t> sizes;
  std::stringstream list(argv[1]);
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(parseSize(item));
  const double busFactor = 2.0 * (world - 1) / world;
  if (rank == 0) std::cout << fmt::format("# raw c10d ProcessGroupGloo, {} rank(s), float32 sum\n", world);
  for (int64_t bytes : sizes) {
    int64_t count = std::max<int64_t>(1, bytes / 4);
    int iters =
        argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::clamp<int64_t>((64LL << 20) / (count * 4), 5, 50));
    std::vector<at::Tensor> tensors{at::full({count}, rank + 1.0, at::kFloat)};
    for (int i = 0; i < 3; ++i) group.allreduce(tensors)->wait();
    group.barrier()->wait();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) group.allreduce(tensors)->wait();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    std::vector<at::Tensor> slowest{at::tensor({seconds}, at::kDouble)};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    group.allreduce(slowest, max)->wait();
    seconds = slowest[0].item<double>();
    double algbw = count * 4 / seconds / 1e9;
    if (rank == 0) {
      std::cout << fmt::format("  {:>12} {:>12} {:>7} {:>12.1f} {:>10.3f} {:>10.3f} {:>7}\n", count * 4, count, iters,
                               seconds * 1e6, algbw, algbw * busFactor, "n/a");
    }
  }
  group.barrier()->wait();
  if (rank == 0) std::remove(fmt::format("/tmp/raw-gloo-{}", port).c_str());
  return 0;
}

// bench/allreduce.cpp — `lockstep bench allreduce`, with nccl-tests' definitions:
// algbw = bytes / time, busbw = algbw * 2(n-1)/n (what each link carries in a
// ring allreduce, comparable across world sizes).
#include <ATen/ATen.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "lockstep/comm/host_staging.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"

namespace lockstep::cli {

namespace {
at::ScalarType dtypeOf(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "float16") return at::kHalf;
  if (name == "bfloat16") return at::kBFloat16;
  return at::kFloat;
}
ReduceOp opOf(const std::string& name) {
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  return ReduceOp::kSum;
}
/// The value every element must hold after one reduction of "rank + 1" everywhere.
double expected(ReduceOp op, int world) {
  switch (op) {
    case ReduceOp::kSum: return world * (world + 1) / 2.0;
    case ReduceOp::kAvg: return (world + 1) / 2.0;
    case ReduceOp::kMax: return world;
    case ReduceOp::kMin: return 1;
  }
  return 0;
}
/// Where the buffers live, and the communicator that takes them there: CUDA tensors over a
/// backend that moves host memory go through pinned host buffers.
std::pair<c10::Device, std::shared_ptr<Communicator>> placeBuffers(const std::string& choice, const Context& ctx) {
  const bool nccl = ctx.comm->backend() == Backend::kNccl;
  const DeviceChoice wanted =
      choice == "auto" ? (nccl ? DeviceChoice::kCuda : DeviceChoice::kCpu) : parseDeviceChoice(choice, "--device");
  const c10::Device device = pickDevice(wanted, ctx.world.localRank, "--device");
  if (device.is_cuda() && !nccl) return {device, withHostStaging(ctx.comm)};
  return {device, ctx.comm};
}
}  // namespace

int benchAllreduce(const AllreduceBenchOptions& o) {
  Context ctx = init();
  const auto [device, placed] = placeBuffers(o.device, ctx);
  Communicator& comm = *placed;
  int world = comm.size();
  auto dtype = dtypeOf(o.dtype);
  auto op = opOf(o.op);
  int64_t elementSize = static_cast<int64_t>(c10::elementSize(dtype));
  double busFactor = world > 1 ? 2.0 * (world - 1) / world : 0.0;

  nlohmann::json rows = nlohmann::json::array();
  bool master = comm.rank() == 0;
  if (master && !o.json) {
    std::cout << fmt::format(
        "# lockstep bench allreduce: backend {}, {} rank(s), dtype {}, op {}, buffers on {}, {} thread(s)/rank\n",
        comm.backendName(), world, o.dtype, o.op, device.str(), ctx.numThreads);
    std::cout << fmt::format("# {:>12} {:>12} {:>7} {:>12} {:>10} {:>10} {:>7}\n", "size(B)", "count(elts)", "iters",
                             "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  int wrongTotal = 0;
  for (int64_t bytes : o.sizes) {
    int64_t count = std::max<int64_t>(1, bytes / elementSize);
    int64_t realBytes = count * elementSize;
    int iters = o.iters > 0 ? o.iters : static_cast<int>(std::clamp<int64_t>((64LL << 20) / realBytes, 5, 50));
    std::vector<at::Tensor> tensors{
        at::full({count}, comm.rank() + 1.0, at::TensorOptions().dtype(dtype).device(device))};
    int64_t wrong = 0;
    if (o.check) {
      // Read after a wait on the stream (nccl: no host wait), as the gradient engine does.
      comm.allreduce(tensors, op)->waitOnStream();
      auto diff = (tensors[0].to(at::kDouble) - expected(op, world)).abs();
      wrong = (diff > 1e-2 * expected(op, world)).sum().item<int64_t>();
    }
    for (int i = 0; i < o.warmup; ++i) comm.allreduce(tensors, op)->wait();
    comm.barrier()->wait();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) comm.allreduce(tensors, op)->wait();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    // The slowest rank decides, as in nccl-tests.
    std::vector<at::Tensor> stats{at::tensor({seconds, static_cast<double>(wrong)}, at::kDouble)};
    comm.allreduce(stats, ReduceOp::kMax)->wait();
    seconds = stats[0][0].item<double>();
    wrong = static_cast<int64_t>(stats[0][1].item<double>());
    wrongTotal += static_cast<int>(wrong);
    double algbw = realBytes / seconds / 1e9;
    double busbw = algbw * busFactor;
    if (master) {
      if (o.json) {
        rows.push_back({{"bytes", realBytes},
                        {"count", count},
                        {"iters", iters},
                        {"time_us", seconds * 1e6},
                        {"algbw_gbps", algbw},
                        {"busbw_gbps", busbw},
                        {"wrong", wrong}});
      } else {
        std::cout << fmt::format("  {:>12} {:>12} {:>7} {:>12.1f} {:>10.3f} {:>10.3f} {:>7}\n", realBytes, count, iters,
                                 seconds * 1e6, algbw, busbw, o.check ? std::to_string(wrong) : "n/a");
      }
    }
  }
  if (master && o.json) {
    nlohmann::json doc = {{"benchmark", "allreduce"},
                          {"backend", comm.backendName()},
                          {"world_size", world},
                          {"dtype", o.dtype},
                          {"op", o.op},
                          {"device", device.str()},
                          {"threads_per_rank", ctx.numThreads},
                          {"busbw_factor", busFactor},
                          {"results", rows}};
    std::cout << doc.dump() << "\n";  // one line: the last line of the output is the document
  }
  if (wrongTotal > 0) {
    if (master) std::cerr << "lockstep bench allreduce: " << wrongTotal << " wrong element(s) after reduction\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace lockstep::cli

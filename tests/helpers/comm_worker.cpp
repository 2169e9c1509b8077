// comm_worker — a real worker process for the multiprocess tests.
//
//   comm_worker check            every collective with value checks; each rank prints "rank R: N of N checks
//                                passed" and exits 1 on its own failures; rank 0 then prints "all checks passed"
//   comm_worker loop [PID_DIR]   allreduce forever (writes PID_DIR/<rank>.pid first)
//   comm_worker die RANK ITER    allreduce; RANK kills itself with SIGKILL at iteration ITER
//   comm_worker stall RANK SECS  RANK sleeps SECS before its allreduce, the others call it
//   comm_worker mismatch         rank 0 allreduces 4 elements, the others 8 (a desync)
//   comm_worker groups           (4 ranks) splits into rows {0,1},{2,3} and columns {0,2},{1,3}; every
//                                collective with value checks inside each, and sums that tell the groups apart
//   comm_worker groups-die RANK  (4 ranks) splits into rows; RANK kills itself, the others allreduce 300 times
//                                in their row
// A CommError is printed as "CommError kind=<kind> after_ms=<n>: <message>" and exits 3.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "lockstep/rendezvous/init.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

int checks = 0;
int failures = 0;
void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::cerr << "check failed: " << what << std::endl;
  }
}

bool close(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() != b.numel()) return false;
  if (a.numel() == 0) return true;
  return (a.to(at::kDouble).view({-1}) - b.to(at::kDouble).view({-1})).abs().max().item<double>() < 1e-9;
}

at::Tensor inputFor(int rank, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kLong).remainder(7) + (rank + 1)).to(dtype);
}

void check(Communicator& comm) {
  int rank = comm.rank();
  int world = comm.size();
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1001), int64_t(1) << 20}) {
      std::string tag = std::string(c10::toString(dtype)) + " n=" + std::to_string(n);
      auto base = at::arange(n, at::kLong).remainder(7).to(at::kDouble);
      std::vector<at::Tensor> sum{inputFor(rank, n, dtype)};
      comm.allreduce(sum, ReduceOp::kSum)->wait();
      expect(close(sum[0], base * world + world * (world + 1) / 2.0), "allreduce sum " + tag);
      std::vector<at::Tensor> avg{inputFor(rank, n, dtype)};
      comm.allreduce(avg, ReduceOp::kAvg)->wait();
      expect(close(avg[0], base + (world + 1) / 2.0), "allreduce avg " + tag);
      std::vector<at::Tensor> mx{inputFor(rank, n, dtype)};
      comm.allreduce(mx, ReduceOp::kMax)->wait();
      expect(close(mx[0], base + world), "allreduce max " + tag);
      std::vector<at::Tensor> mn{inputFor(rank, n, dtype)};
      comm.allreduce(mn, ReduceOp::kMin)->wait();
      expect(close(mn[0], base + 1), "allreduce min " + tag);
      std::vector<at::Tensor> b{inputFor(rank, n, dtype)};
      comm.broadcast(b, world - 1)->wait();
      expect(close(b[0], inputFor(world - 1, n, at::kDouble)), "broadcast " + tag);
      at::Tensor gathered = at::empty({world * n}, at::TensorOptions().dtype(dtype));
      comm.allgather(inputFor(rank, n, dtype), gathered)->wait();
      for (int r = 0; r < world; ++r) {
        expect(close(gathered.narrow(0, r * n, n), inputFor(r, n, at::kDouble)), "allgather " + tag);
      }
      at::Tensor whole = at::full({world * n}, -1, at::TensorOptions().dtype(dtype));
      whole.narrow(0, rank * n, n).copy_(inputFor(rank, n, dtype));
      comm.allgather(whole.narrow(0, rank * n, n), whole)->wait();  // in place: the input is its own chunk
      for (int r = 0; r < world; ++r) {
        expect(close(whole.narrow(0, r * n, n), inputFor(r, n, at::kDouble)), "allgather in place " + tag);
      }
      at::Tensor scattered = at::empty({n}, at::TensorOptions().dtype(dtype));
      comm.reduceScatter(inputFor(rank, world * n, dtype), scattered, ReduceOp::kSum)->wait();
      auto full = at::arange(world * n, at::kLong).remainder(7).to(at::kDouble) * world + world * (world + 1) / 2.0;
      expect(close(scattered, full.narrow(0, rank * n, n)), "reduce_scatter " + tag);
      if (world > 1) {
        at::Tensor got = at::empty({n}, at::TensorOptions().dtype(dtype));
        auto s = comm.send(inputFor(rank, n, dtype), (rank + 1) % world, 3);
        auto r = comm.recv(got, (rank + world - 1) % world, 3);
        s->wait();
        r->wait();
        expect(close(got, inputFor((rank + world - 1) % world, n, at::kDouble)), "send/recv " + tag);
      }
    }
  }
  // Lists: fused per dtype on the wire, every tensor gets its own result back.
  std::vector<at::Tensor> mixed{inputFor(rank, 5, at::kFloat),  inputFor(rank, 0, at::kFloat),
                                inputFor(rank, 3, at::kDouble), inputFor(rank, 7, at::kFloat),
                                inputFor(rank, 4, at::kInt),    inputFor(rank, 2, at::kLong)};
  comm.allreduce(mixed, ReduceOp::kSum)->wait();
  for (size_t i = 0; i < mixed.size(); ++i) {
    int64_t n = mixed[i].numel();
    auto want = at::arange(n, at::kLong).remainder(7).to(at::kDouble) * world + world * (world + 1) / 2.0;
    expect(close(mixed[i], want), "fused allreduce, tensor " + std::to_string(i));
  }
  std::vector<at::Tensor> many{inputFor(rank, 6, at::kFloat), inputFor(rank, 3, at::kLong),
                               inputFor(rank, 2, at::kBFloat16)};
  comm.broadcast(many, 0)->wait();
  for (size_t i = 0; i < many.size(); ++i) {
    expect(close(many[i], inputFor(0, many[i].numel(), at::kDouble)), "list broadcast, tensor " + std::to_string(i));
  }
  std::vector<at::Tensor> outs;
  for (int r = 0; r < world; ++r) outs.push_back(at::empty({2, 3}, at::kDouble));
  comm.allgather(inputFor(rank, 6, at::kDouble).view({2, 3}), outs)->wait();
  for (int r = 0; r < world; ++r)
    expect(close(outs[r], inputFor(r, 6, at::kDouble)), "list allgather " + std::to_string(r));
  comm.barrier()->wait();
}

void writePid(const std::string& dir, int rank) {
  std::string path = dir + "/" + std::to_string(rank) + ".pid";
  {
    std::ofstream out(path + ".tmp");
    out << ::getpid() << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << "usage: comm_worker check|loop|die|stall|mismatch ...\n";
    return 2;
  }
  auto start = Clock::now();
  try {
    Context ctx = init();
    Communicator& comm = *ctx.comm;
    const std::string& mode = args[0];
    if (mode == "check") {
      check(comm);
      // Each rank's own verdict, decided without the collectives under test.
      std::cout << "rank " << comm.rank() << ": " << (checks - failures) << " of " << checks << " checks passed"
                << std::endl;
      if (failures > 0 || checks == 0) return 1;
      // Every rank learns whether any rank failed.
      std::vector<at::Tensor> bad{at::tensor({static_cast<double>(failures)})};
      comm.allreduce(bad, ReduceOp::kSum)->wait();
      if (bad[0].item<double>() > 0) {
        std::cerr << "rank " << comm.rank() << ": checks failed on some rank\n";
        return 1;
      }
      if (comm.rank() == 0) {
        std::cout << "all checks passed on " << comm.size() << " ranks (backend " << comm.backendName() << ")"
                  << std::endl;
      }
      return 0;
    }
    if (mode == "loop" || mode == "die") {
      if (mode == "loop" && args.size() > 1) writePid(args[1], comm.rank());
      int dieRank = mode == "die" ? std::stoi(args.at(1)) : -1;
      int dieIter = mode == "die" ? std::stoi(args.at(2)) : -1;
      for (int iter = 0;; ++iter) {
        if (comm.rank() == dieRank && iter == dieIter) ::raise(SIGKILL);
        std::vector<at::Tensor> t{at::ones({4096})};
        start = Clock::now();
        comm.allreduce(t)->wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    if (mode == "stall") {
      int stallRank = std::stoi(args.at(1));
      if (comm.rank() == stallRank) {
        std::this_thread::sleep_for(std::chrono::seconds(std::stoi(args.at(2))));
        return 0;
      }
      std::vector<at::Tensor> t{at::ones({16})};
      start = Clock::now();
      comm.allreduce(t)->wait();
      std::cout << "allreduce returned without the stalled rank" << std::endl;
      return 0;
    }
    if (mode == "groups") {
      const int rank = comm.rank();
      auto rows = comm.split(rank / 2, rank, "row" + std::to_string(rank / 2));
      auto columns = comm.split(rank % 2, -rank, "column" + std::to_string(rank % 2));  // key: reversed order
      expect(rows->size() == 2 && rows->rank() == rank % 2, "row rank");
      expect(columns->size() == 2 && columns->rank() == 1 - rank / 2, "column rank (ordered by key)");
      expect(columns->globalRanks() == std::vector<int>{rank % 2 + 2, rank % 2}, "column global ranks");
      // Interleaved on both groups: a message of one must never reach the other.
      for (int i = 0; i < 20; ++i) {
        std::vector<at::Tensor> r{at::full({1000}, static_cast<double>(rank))};
        std::vector<at::Tensor> c{at::full({1000}, static_cast<double>(rank))};
        auto rw = rows->allreduce(r);
        auto cw = columns->allreduce(c);
        rw->wait();
        cw->wait();
        expect(r[0].eq(rank / 2 == 0 ? 1.0 : 5.0).all().item<bool>(), "row sum of global ranks");
        expect(c[0].eq(rank % 2 == 0 ? 2.0 : 4.0).all().item<bool>(), "column sum of global ranks");
      }
      check(*rows);
      check(*columns);
      std::cout << "rank " << rank << ": " << (checks - failures) << " of " << checks << " group checks passed"
                << std::endl;
      return failures > 0 ? 1 : 0;
    }
    if (mode == "groups-die") {
      const int deadRank = std::stoi(args.at(1));
      auto rows = comm.split(comm.rank() / 2, comm.rank(), "row" + std::to_string(comm.rank() / 2));
      if (comm.rank() == deadRank) ::raise(SIGKILL);
      for (int iter = 0; iter < 300; ++iter) {  // the row without the dead rank finishes
        std::vector<at::Tensor> t{at::ones({4096})};
        start = Clock::now();
        rows->allreduce(t)->wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::cout << "rank " << comm.rank() << ": row allreduces done" << std::endl;
      return 0;
    }
    if (mode == "mismatch") {
      std::vector<at::Tensor> t{at::ones({comm.rank() == 0 ? 4 : 8})};
      start = Clock::now();
      comm.allreduce(t)->wait();
      std::cout << "mismatched allreduce returned" << std::endl;
      return 0;
    }
    std::cerr << "comm_worker: unknown mode " << mode << "\n";
    return 2;
  } catch (const CommError& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::cerr << "CommError kind=" << toString(e.kind()) << " after_ms=" << ms << ": " << e.what() << std::endl;
    std::_Exit(3);  // skip destructors: the backend may still hold a dead connection
  } catch (const std::exception& e) {
    std::cerr << "comm_worker: " << e.what() << std::endl;
    return 1;
  }
}

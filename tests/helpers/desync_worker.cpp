// desync_worker — a real worker process for the desync-check tests and its cost measurement.
//
//   desync_worker size                  3 matching allreduces, then rank 0 allreduces 1024 float32, the others 512
//   desync_worker bench BYTES ITERS ROUNDS M1,M2,...
//                                       per-allreduce time of BYTES (float32) under each desync-check mode
//                                       (off, all, sample, sample:N): ROUNDS rounds, each timing ITERS
//                                       allreduces per mode in turn (so load from elsewhere hits every mode
//                                       alike); rank 0 prints one line per mode with the median round
// The communicator is init()'s, wrapped here by withDesyncCheck(desyncCheckFromEnv()) — init() is given
// LOCKSTEP_DESYNC_CHECK=off so it never wraps twice. A CommError is printed as
// "CommError kind=<kind> after_ms=<n>: <message>" and exits 3.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "lockstep/comm/desync_check.h"
#include "lockstep/rendezvous/init.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, sep);) parts.push_back(p);
  return parts;
}

DesyncCheckOptions optionsFor(const std::string& mode) {
  return desyncCheckFromEnv(Environment({{env::kDesyncCheck, mode}}));
}

/// Seconds per allreduce of `count` float32 over `comm`, the slowest rank's.
double timeAllreduce(Communicator& comm, int64_t count, int iters) {
  std::vector<at::Tensor> t{at::ones({count})};
  comm.barrier()->wait();
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) comm.allreduce(t)->wait();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  std::vector<at::Tensor> slowest{at::tensor({seconds}, at::kDouble)};
  comm.allreduce(slowest, ReduceOp::kMax)->wait();
  return slowest[0].item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << "usage: desync_worker size | bench BYTES ITERS ROUNDS MODES\n";
    return 2;
  }
  auto start = Clock::now();
  try {
    Environment real = Environment::fromProcess();
    auto vars = real.vars();
    vars[env::kDesyncCheck] = "off";  // init() must not wrap: this program does, from the real environment
    Context ctx = init(InitOptions{}, Environment(vars));
    const std::string& mode = args[0];
    if (mode == "size") {
      auto comm = withDesyncCheck(ctx.comm, desyncCheckFromEnv(real));
      for (int i = 0; i < 3; ++i) {
        std::vector<at::Tensor> t{at::ones({16})};
        comm->allreduce(t)->wait();
      }
      std::vector<at::Tensor> t{at::ones({comm->rank() == 0 ? 1024 : 512})};
      start = Clock::now();
      comm->allreduce(t)->wait();
      std::cout << "mismatched allreduce returned" << std::endl;
      return 0;
    }
    if (mode == "bench") {
      int64_t bytes = std::stoll(args.at(1));
      int iters = std::stoi(args.at(2));
      int roundCount = std::stoi(args.at(3));
      auto modes = split(args.at(4), ',');
      // One wrapper per mode for the whole run, so a sampled one counts on across rounds.
      std::map<std::string, std::shared_ptr<Communicator>> comms;
      for (const auto& m : modes) {
        comms[m] = withDesyncCheck(ctx.comm, optionsFor(m));
        std::vector<at::Tensor> t{at::ones({std::max<int64_t>(1, bytes / 4)})};
        for (int i = 0; i < 20; ++i) comms[m]->allreduce(t)->wait();  // passes a sampled check's first collectives
      }
      std::map<std::string, std::vector<double>> rounds;
      for (int round = 0; round < roundCount; ++round) {
        for (const auto& m : modes)
          rounds[m].push_back(timeAllreduce(*comms[m], std::max<int64_t>(1, bytes / 4), iters));
      }
      if (ctx.comm->rank() == 0) {
        double base = 0;
        for (const auto& m : modes) {
          auto r = rounds[m];
          std::sort(r.begin(), r.end());
          double median = r[r.size() / 2];
          if (m == modes.front()) base = median;
          std::printf(
              "desync check %-12s allreduce %lld B x %d: median %.1f us per op (rounds %.1f..%.1f us), "
              "%+.1f%% vs %s\n",
              m.c_str(), static_cast<long long>(bytes), iters, median * 1e6, r.front() * 1e6, r.back() * 1e6,
              (median / base - 1) * 100, modes.front().c_str());
        }
        std::fflush(stdout);
      }
      return 0;
    }
    std::cerr << "desync_worker: unknown mode " << mode << "\n";
    return 2;
  } catch (const CommError& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::cerr << "CommError kind=" << toString(e.kind()) << " after_ms=" << ms << ": " << e.what() << std::endl;
    std::_Exit(3);
  } catch (const std::exception& e) {
    std::cerr << "desync_worker: " << e.what() << std::endl;
    return 1;
  }
}

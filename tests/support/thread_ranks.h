// thread_ranks.h — run one function per rank, each on its own thread, over an
// in-memory store: the fast way to test multi-rank code in one process.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/nccl_order.h"

namespace lockstep::test {

/// A shared_ptr to `comm` that does not own it (for APIs that keep a communicator, in runRanks).
inline std::shared_ptr<Communicator> borrow(Communicator& comm) {
  return std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
}

/// Connects `world` Gloo communicators and calls fn(rank, comm) on a thread per rank.
/// Rethrows the first exception any rank threw, after all threads joined. With
/// `addressEach` rank r binds 127.0.0.(r+1) (all loopback) instead of 127.0.0.1: the
/// communicators then take the ranks for separate hosts (Gloo's paced transfers).
inline void runRanks(int world, const std::function<void(int, Communicator&)>& fn,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20), bool addressEach = false) {
  Store store = Store::inMemory(timeout);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooOptions o;
        o.rank = r;
        o.worldSize = world;
        o.timeout = timeout;
        if (addressEach) o.hostname = "127.0.0." + std::to_string(r + 1);
        std::shared_ptr<Communicator> comm = makeGlooCommunicator(store, o);
        // LOCKSTEP_NCCL_ORDER=1: NCCL's order over Gloo (src/comm/nccl_order.h).
        if (auto order = detail::ncclOrderFromEnv(Environment::fromProcess())) {
          comm = detail::withNcclOrder(std::move(comm), store, *order);
        }
        fn(r, *comm);
      } catch (...) { errors[static_cast<size_t>(r)] = std::current_exception(); }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace lockstep::test

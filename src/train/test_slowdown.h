// test_slowdown.h — the straggler of FaultInjection (slowRank, slowFactor). Private to train/.
#pragma once

#include <chrono>
#include <thread>

#include "lockstep/train/fault_injection.h"

namespace lockstep::detail {

/// On the slowed rank, sleeps (factor - 1) x the time since `computeStart`: its step then takes
/// `factor` times as long as its computation.
inline void applyTestSlowdown(const FaultInjection& f, int rank, std::chrono::steady_clock::time_point computeStart) {
  if (f.slowRank != rank || f.slowFactor <= 1) return;
  const auto took = std::chrono::steady_clock::now() - computeStart;
  std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(took * (f.slowFactor - 1)));
}

}  // namespace lockstep::detail

// test_slowdown.h — the straggler knob (TrainerOptions::testSlowRank/testSlowFactor). Private to train/.
#pragma once

#include <chrono>
#include <thread>

#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// On the slowed rank, sleeps (factor - 1) x the time since `computeStart`: its step then takes
/// `factor` times as long as its computation.
inline void applyTestSlowdown(const TrainerOptions& o, int rank, std::chrono::steady_clock::time_point computeStart) {
  if (o.testSlowRank != rank || o.testSlowFactor <= 1) return;
  const auto took = std::chrono::steady_clock::now() - computeStart;
  std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(took * (o.testSlowFactor - 1)));
}

}  // namespace lockstep::detail

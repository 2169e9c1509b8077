// StepMarks on the host clock: which steps and spans reach the phase totals. The
// CUDA events behind the same class are run by the device check on a GPU.
#include <gtest/gtest.h>

#include <chrono>

#include "train/step_marks.h"

namespace lockstep::detail {
namespace {

using Clock = StepMarks::Clock;
using us = std::chrono::microseconds;

double total(const StepMarks& m, Phase p) { return m.phaseTotalUs()[static_cast<size_t>(p)]; }

TEST(StepMarks, TimedStepsAddTheSpansBetweenTheirMarks) {
  StepMarks marks(c10::Device(c10::kCPU));
  EXPECT_FALSE(marks.onDevice());
  const Clock::time_point t0{};
  // A warm-up step, closed untimed: it never reaches the totals.
  marks.begin(t0);
  marks.mark(Phase::kDataWait, t0 + us(100));
  marks.mark(Phase::kForward, t0 + us(300));
  marks.end(/*timed=*/false);
  // Two accumulated micro-batches: a phase that repeats adds up.
  const auto t1 = t0 + us(1000);
  marks.begin(t1);
  marks.mark(Phase::kDataWait, t1 + us(1));
  marks.mark(Phase::kForward, t1 + us(3));
  marks.mark(Phase::kBackward, t1 + us(6));
  marks.mark(Phase::kDataWait, t1 + us(10));
  marks.mark(Phase::kForward, t1 + us(15));
  marks.mark(Phase::kBackward, t1 + us(21));
  marks.mark(Phase::kCommWait, t1 + us(28));
  marks.mark(Phase::kOptimizer, t1 + us(36));
  marks.end(/*timed=*/true);
  marks.collect(/*waitForAll=*/true);

  EXPECT_EQ(marks.collectedSteps(), 1);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kDataWait), 1 + 4);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kForward), 2 + 5);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kBackward), 3 + 6);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kCommWait), 7);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kOptimizer), 8);
  EXPECT_DOUBLE_EQ(marks.stepTotalUs(), 36);
}

TEST(StepMarks, DiscardedAndUnmarkedStepsAddNothing) {
  StepMarks marks(c10::Device(c10::kCPU));
  const Clock::time_point t0{};
  marks.begin(t0);
  marks.mark(Phase::kDataWait, t0 + us(5));
  marks.discard();  // a pipeline step: its phases are counted elsewhere
  marks.end(/*timed=*/true);
  marks.begin(t0 + us(10));  // a step with no phase ended
  marks.end(/*timed=*/true);
  marks.mark(Phase::kForward, t0 + us(20));  // outside a step
  marks.begin(t0 + us(30));
  marks.mark(Phase::kForward, t0 + us(32));
  marks.begin(t0 + us(40));  // begins again without end: the open step is dropped
  marks.mark(Phase::kBackward, t0 + us(43));
  marks.end(/*timed=*/true);
  marks.collect(/*waitForAll=*/false);

  EXPECT_EQ(marks.collectedSteps(), 1);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kDataWait), 0);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kForward), 0);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kBackward), 3);
  EXPECT_DOUBLE_EQ(marks.stepTotalUs(), 3);
}

TEST(StepMarks, HostMarksAreCollectedWithoutWaiting) {
  StepMarks marks(c10::Device(c10::kCPU));
  const Clock::time_point t0{};
  for (int s = 0; s < 20; ++s) {
    marks.begin(t0 + us(10 * s));
    marks.mark(Phase::kForward, t0 + us(10 * s + 4));
    marks.end(/*timed=*/true);
  }
  marks.collect(/*waitForAll=*/false);
  EXPECT_EQ(marks.collectedSteps(), 20);
  EXPECT_DOUBLE_EQ(total(marks, Phase::kForward), 80);
}

}  // namespace
}  // namespace lockstep::detail

// The progress text, and the bar's redraw rate measured on a pipe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "lockstep/monitor/progress.h"
#include "lockstep/train/trainer.h"
#include "monitor/run_dir.h"

namespace lockstep {
namespace {

TEST(Progress, DurationsAndTheLine) {
  EXPECT_EQ(formatDuration(0), "0s");
  EXPECT_EQ(formatDuration(45.4), "45s");
  EXPECT_EQ(formatDuration(83), "1m23s");
  EXPECT_EQ(formatDuration(2 * 3600 + 5 * 60 + 9), "2h05m");

  ProgressState s;
  s.epoch = 2;
  s.epochs = 15;
  s.step = 450;
  s.totalSteps = 1000;
  s.etaSeconds = 83;
  s.samplesPerSecond = 3012.4;
  s.loss = 0.41234;
  s.hasLoss = true;
  s.barWidth = 10;
  EXPECT_EQ(formatProgress(s), "epoch 2/15 [####......] step 450/1000 45% ETA 1m23s 3012 samples/s loss 0.4123");
  s.barWidth = 0;
  s.etaSeconds = -1;
  s.samplesPerSecond = 0;
  s.hasLoss = false;
  s.epochs = 0;
  EXPECT_EQ(formatProgress(s), "step 450/1000 45%");
}

TEST(Progress, BarRedrawsAtMostFourTimesASecond) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  {
    ProgressReporter bar(ProgressMode::kBar, 10, fds[1]);
    EXPECT_EQ(bar.mode(), ProgressMode::kBar);
    FitInfo info;
    info.totalSteps = 200;
    info.epochs = 2;
    info.globalBatch = 100;
    bar.onFitStart(info);
    // 200 steps of 10 ms each: 2 s of (recorded) training.
    for (int s = 1; s <= 200; ++s) {
      auto r = test::syntheticStep(s, (s - 1) * 10000.0);
      r.durationUs = 10000;
      r.epoch = (s - 1) / 100;
      bar.onStepEnd(r);
    }
    bar.onFitEnd(FitResult{});
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  auto draws = std::count(out.begin(), out.end(), '\r') / 2;  // each draw starts and ends with '\r'
  EXPECT_GE(draws, 8);
  EXPECT_LE(draws, 10);  // 2 s at <= 4 per second, plus the final one
  EXPECT_EQ(out.back(), '\n');
  auto last = out.substr(out.rfind('\r', out.size() - 2) + 1);
  EXPECT_EQ(last.find("epoch 2/2 [####################] step 200/200 100% ETA 0s 10000 samples/s loss 0.0050"), 0u)
      << last;
}

TEST(Progress, AutoPicksLinesWhenNotATerminal) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_EQ(ProgressReporter(ProgressMode::kAuto, 10, fds[1]).mode(), ProgressMode::kLines);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace lockstep

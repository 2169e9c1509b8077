#include "train/step_timer.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace lockstep::detail {

void StepTimer::beginStep() {
  phaseUs_.fill(0);
  pipelineUs_ = pipelineComputeUs_ = 0;
  if (recording_) {
    record_.phases.clear();
    record_.buckets.clear();
  }
  mark_ = Clock::now();
  stepStart_ = mark_;
  pipelineStep_ = false;
  if (marks_.onDevice()) marks_.begin(mark_);
}

void StepTimer::endPhase(Phase phase) {
  auto now = Clock::now();
  if (phase == Phase::kBackward) backwardStart_ = mark_;
  double us = std::chrono::duration<double, std::micro>(now - mark_).count();
  phaseUs_[static_cast<size_t>(phase)] += us;
  if (recording_) record_.phases.push_back(PhaseSpan{phase, sinceOrigin(mark_), us});
  if (marks_.onDevice()) marks_.mark(phase, now);
  mark_ = now;
}

void StepTimer::endPipelineBatch(const PipelineTimings& timings) {
  const auto now = Clock::now();
  const double base = sinceOrigin(mark_);
  const double totalUs = std::chrono::duration<double, std::micro>(now - mark_).count();
  double chargedUs = 0;
  auto charge = [&](Phase phase, double startUs, double us, int micro) {
    if (us <= 0) return;
    phaseUs_[static_cast<size_t>(phase)] += us;
    chargedUs += us;
    if (recording_) record_.phases.push_back(PhaseSpan{phase, base + startUs, us, micro});
  };
  for (const auto& op : timings.ops) {
    const double startUs = 1e6 * op.start, waitUs = 1e6 * op.waitSeconds;
    charge(Phase::kCommWait, startUs, waitUs, op.op.micro);
    charge(op.op.kind == PipelineOp::kForward ? Phase::kForward : Phase::kBackward, startUs + waitUs,
           1e6 * (op.end - op.start) - waitUs, op.op.micro);
  }
  const double lastEndUs = timings.ops.empty() ? 0 : 1e6 * timings.ops.back().end;
  charge(Phase::kCommWait, lastEndUs, totalUs - chargedUs, -1);
  pipelineUs_ += 1e6 * timings.seconds;
  pipelineComputeUs_ += 1e6 * timings.computeSeconds;
  pipelineStep_ = true;
  mark_ = now;
}

void StepTimer::endStep(const std::vector<BucketTiming>& timings) {
  const double stepUs = std::chrono::duration<double, std::micro>(mark_ - stepStart_).count();
  // The buckets are launched in order, so one sweep merges their intervals.
  double commUs = 0;
  Clock::time_point coveredUntil{};
  int64_t bytes = 0;
  for (const auto& t : timings) {
    auto begin = std::max(t.launched, coveredUntil);
    if (t.completed > begin) commUs += std::chrono::duration<double, std::micro>(t.completed - begin).count();
    coveredUntil = std::max(coveredUntil, t.completed);
    bytes += t.bytes;
    if (recording_) {
      record_.buckets.push_back(BucketSpan{t.bucket, t.bytes, sinceOrigin(t.launched), sinceOrigin(t.completed)});
    }
  }
  if (!timings.empty()) {
    buckets_ = static_cast<int>(timings.size());
    bucketBytes_ = bytes;
  }
  const bool timed = timedSteps_ >= 0;
  const bool deviceTimed = marks_.onDevice() && !pipelineStep_;  // else the host's clock reads are the totals
  if (deviceTimed) {
    marks_.end(timed);
  } else {
    marks_.discard();
  }
  if (!timed) {
    timedStart_ = Clock::now();
    timedSteps_ = 0;
  } else {
    timedEnd_ = Clock::now();
    ++timedSteps_;
    if (!deviceTimed) {
      for (size_t p = 0; p < phaseUs_.size(); ++p) phaseTotalUs_[p] += phaseUs_[p];
      stepTotalUs_ += stepUs;
    }
    commTotalUs_ += commUs;
    pipelineTotalUs_ += pipelineUs_;
    pipelineComputeTotalUs_ += pipelineComputeUs_;
    addBucketProfile(timings);
  }
  record_.startUs = sinceOrigin(stepStart_);
  record_.durationUs = stepUs;
}

void StepTimer::addBucketProfile(const std::vector<BucketTiming>& timings) {
  if (timings.empty()) return;
  if (timings.size() != bucketTotals_.size()) {  // the first profiled step, or the buckets changed: start over
    bucketTotals_.assign(timings.size(), BucketProfile{});
    profiledSteps_ = 0;
  }
  Clock::time_point previousDone = timings.front().launched;
  for (size_t b = 0; b < timings.size(); ++b) {
    const BucketTiming& t = timings[b];
    BucketProfile& total = bucketTotals_[b];
    total.bytes = t.bytes;
    total.readySeconds += std::chrono::duration<double>(t.launched - backwardStart_).count();
    total.commSeconds += std::chrono::duration<double>(t.completed - std::max(t.launched, previousDone)).count();
    previousDone = std::max(previousDone, t.completed);
  }
  ++profiledSteps_;
}

double StepTimer::timedSeconds() const { return std::chrono::duration<double>(timedEnd_ - timedStart_).count(); }

StepBreakdown StepTimer::breakdown(Communicator& comm) {
  marks_.collect(/*waitForAll=*/true);
  StepBreakdown b;
  b.buckets = buckets_;
  b.bucketBytes = bucketBytes_;
  for (BucketProfile p : bucketTotals_) {
    p.readySeconds /= static_cast<double>(profiledSteps_);
    p.commSeconds /= static_cast<double>(profiledSteps_);
    b.bucketProfile.push_back(p);
  }
  if (timedSteps_ > 0) {
    const double perStep = 1e-6 / static_cast<double>(timedSteps_);
    b.steps = timedSteps_;
    for (size_t p = 0; p < phaseTotalUs_.size(); ++p) {
      b.phaseSeconds[p] = (phaseTotalUs_[p] + marks_.phaseTotalUs()[p]) * perStep;
    }
    b.stepSeconds = (stepTotalUs_ + marks_.stepTotalUs()) * perStep;
    b.commSeconds = commTotalUs_ * perStep;
    b.commExposedSeconds = b.phase(Phase::kCommWait);
    if (comm.size() > 1 && b.commSeconds > 0) {
      b.commHiddenFraction = std::clamp(1.0 - b.commExposedSeconds / b.commSeconds, 0.0, 1.0);
    }
    if (pipelineTotalUs_ > 0) {
      b.pipelineIdleFraction = std::clamp(1.0 - pipelineComputeTotalUs_ / pipelineTotalUs_, 0.0, 1.0);
    }
  }
  b.pipelineIdleFractionMax = b.pipelineIdleFraction;
  b.pipelineBubble = b.pipelineIdleFraction;
  b.stepSecondsMax = b.stepSeconds;
  b.commExposedSecondsMax = b.commExposedSeconds;
  if (comm.size() > 1) {
    std::vector<at::Tensor> slowest{at::tensor(
        {b.stepSeconds, b.commExposedSeconds, b.pipelineIdleFraction, -b.pipelineIdleFraction}, at::kDouble)};
    comm.allreduce(slowest, ReduceOp::kMax)->wait();
    b.stepSecondsMax = slowest[0][0].item<double>();
    b.commExposedSecondsMax = slowest[0][1].item<double>();
    b.pipelineIdleFractionMax = slowest[0][2].item<double>();
    b.pipelineBubble = -slowest[0][3].item<double>();
  }
  return b;
}

}  // namespace lockstep::detail

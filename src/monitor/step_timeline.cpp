#include "lockstep/monitor/step_timeline.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "monitor/run_files.h"
#include "monitor/system_sample.h"

namespace lockstep {

namespace {

std::string join(const std::string& dir, const std::string& sub, const std::string& name) {
  return (std::filesystem::path(dir) / sub / name).string();
}

/// The counter values of `samples`: CPU and memory, and the GPU's where there is one.
std::vector<TraceCounter> countersOf(const std::vector<detail::SystemSample>& samples) {
  using detail::kMib;
  std::vector<TraceCounter> out;
  for (const auto& s : samples) {
    out.push_back({"cpu %", s.time, {{"cpu", s.cpuPercent}}});
    out.push_back({"memory MiB", s.time, {{"rss", static_cast<double>(s.rssBytes) / kMib}}});
    if (!s.gpu) continue;
    if (s.gpu->utilPercent >= 0) out.push_back({"gpu %", s.time, {{"util", s.gpu->utilPercent}}});
    if (s.gpu->memBytes >= 0) {
      out.push_back({"gpu memory MiB", s.time, {{"used", static_cast<double>(s.gpu->memBytes) / kMib}}});
    }
  }
  return out;
}

}  // namespace

double bucketUnionUs(const std::vector<BucketSpan>& buckets) {
  std::vector<std::pair<double, double>> intervals;
  intervals.reserve(buckets.size());
  for (const auto& b : buckets) {
    if (b.doneUs > b.launchUs) intervals.emplace_back(b.launchUs, b.doneUs);
  }
  std::sort(intervals.begin(), intervals.end());
  double total = 0;
  double coveredUntil = -1e300;
  for (const auto& [begin, end] : intervals) {
    double from = std::max(begin, coveredUntil);
    if (end > from) total += end - from;
    coveredUntil = std::max(coveredUntil, end);
  }
  return total;
}

std::string chromeTraceJson(const std::vector<StepRecord>& steps, int rank, double unixTimeAtOrigin,
                            const std::vector<TraceCounter>& counters) {
  // Whole microseconds since the Unix epoch (~1.8e15): exact in the doubles
  // viewers parse them into, where fractions would round and break nesting.
  const double base = unixTimeAtOrigin * 1e6;
  auto tick = [base](double us) { return static_cast<int64_t>(std::llround(base + us)); };
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += fmt::format(
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"name\":\"rank {0}\"}}}},\n"
      "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"sort_index\":{0}}}}},\n"
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{\"name\":\"compute\"}}}},\n"
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":1,\"args\":{{\"name\":\"communication\"}}}}",
      rank);
  auto slice = [&](const std::string& name, int tid, int64_t begin, int64_t end, const std::string& args) {
    out += fmt::format(",\n{{\"name\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{}{}}}", name, rank,
                       tid, begin, end - begin, args.empty() ? std::string() : ",\"args\":{" + args + "}");
  };
  // Slices of one thread must nest or follow each other: after rounding, a
  // slice starts no earlier than the previous one on its thread ended.
  int64_t computeEnd = INT64_MIN, commEnd = INT64_MIN;
  struct Span {
    std::string name;
    int64_t begin, end;
  };
  std::vector<Span> phases;
  for (const auto& s : steps) {
    phases.clear();
    for (const auto& p : s.phases) {
      int64_t begin = std::max(tick(p.startUs), computeEnd);
      int64_t end = std::max(begin, tick(p.startUs + p.durationUs));
      // Pipeline stages name the micro-batch: "forward 3", "backward 3", "comm_wait 3".
      phases.push_back(
          Span{p.micro >= 0 ? fmt::format("{} {}", toString(p.phase), p.micro) : toString(p.phase), begin, end});
      computeEnd = end;
    }
    // The step slice encloses its phases exactly, so viewers nest them under it.
    int64_t stepBegin = phases.empty() ? std::max(tick(s.startUs), computeEnd) : phases.front().begin;
    int64_t stepEnd = std::max({stepBegin, computeEnd, tick(s.startUs + s.durationUs)});
    computeEnd = stepEnd;
    slice(fmt::format("step {}", s.step), 0, stepBegin, stepEnd,
          fmt::format("\"step\":{},\"epoch\":{},\"loss\":{:.6g},\"lr\":{:.6g}", s.step, s.epoch, s.loss, s.lr));
    for (const auto& p : phases) slice(p.name, 0, p.begin, p.end, "");
    // One communication thread completes buckets in launch order: bucket k is
    // drawn from when it was launched or bucket k-1 completed, whichever is
    // later, to its completion, so the slices do not overlap; args keep the launch time.
    for (const auto& b : s.buckets) {
      int64_t launched = tick(b.launchUs);
      int64_t begin = std::max(launched, commEnd);
      int64_t end = std::max(begin, tick(b.doneUs));
      slice(fmt::format("allreduce bucket {}", b.bucket), 1, begin, end,
            fmt::format("\"bucket\":{},\"bytes\":{},\"step\":{},\"launched\":{},\"queued_us\":{}", b.bucket, b.bytes,
                        s.step, launched, begin - launched));
      commEnd = end;
    }
  }
  for (const auto& c : counters) {
    std::string args;
    for (const auto& [key, value] : c.values)
      args += fmt::format("{}\"{}\":{:.6g}", args.empty() ? "" : ",", key, value);
    out += fmt::format(",\n{{\"name\":\"{}\",\"ph\":\"C\",\"pid\":{},\"ts\":{},\"args\":{{{}}}}}", c.name, rank,
                       std::llround(c.unixTime * 1e6), args);
  }
  out += "\n]}\n";
  return out;
}

StepTimeline::StepTimeline(const std::string& dir, int rank, int64_t traceSteps)
    : rank_(rank), traceSteps_(traceSteps), phases_(std::make_unique<detail::AppendFile>()) {
  detail::createDirectories((std::filesystem::path(dir) / "phases").string());
  phases_->open(join(dir, "phases", fmt::format("rank{}.jsonl", rank)));
  if (traceSteps_ != 0) {
    detail::createDirectories((std::filesystem::path(dir) / "timeline").string());
    tracePath_ = join(dir, "timeline", fmt::format("rank{}.trace.json", rank));
    // Fail now, not at the end of the run, when the file cannot be written.
    detail::writeFileAtomically(tracePath_, {chromeTraceJson({}, rank_, 0)}, detail::Durability::kProcessCrash);
  }
}

StepTimeline::~StepTimeline() {
  if (!traceWritten_ && !traced_.empty()) writeTrace();
}

void StepTimeline::onFitStart(const FitInfo& info) {
  info_ = info;
  traced_.clear();
  traceWritten_ = false;
  if (traceSteps_ > 0) traced_.reserve(static_cast<size_t>(traceSteps_));
}

void StepTimeline::onStepEnd(const StepRecord& r) {
  std::array<double, kPhaseCount> ms{};
  for (const auto& p : r.phases) ms[static_cast<size_t>(p.phase)] += p.durationUs * 1e-3;
  double endUnix = info_.unixTimeAtOrigin + (r.startUs + r.durationUs) * 1e-6;
  phases_->append(fmt::format(
      "{{\"step\":{},\"time\":{:.6f},\"data_wait_ms\":{:.4f},\"forward_ms\":{:.4f},\"backward_ms\":{:.4f},"
      "\"comm_wait_ms\":{:.4f},\"optimizer_ms\":{:.4f},\"step_ms\":{:.4f},\"comm_ms\":{:.4f},\"buckets\":{}{}}}\n",
      r.step, endUnix, ms[static_cast<size_t>(Phase::kDataWait)], ms[static_cast<size_t>(Phase::kForward)],
      ms[static_cast<size_t>(Phase::kBackward)], ms[static_cast<size_t>(Phase::kCommWait)],
      ms[static_cast<size_t>(Phase::kOptimizer)], r.durationUs * 1e-3, bucketUnionUs(r.buckets) * 1e-3,
      r.buckets.size(),
      r.devicePeakBytes >= 0 ? fmt::format(",\"device_peak_bytes\":{}", r.devicePeakBytes) : std::string()));
  if (traceSteps_ == 0 || traceWritten_) return;
  if (traceSteps_ < 0 || static_cast<int64_t>(traced_.size()) < traceSteps_) traced_.push_back(r);
  if (traceSteps_ > 0 && static_cast<int64_t>(traced_.size()) == traceSteps_) writeTrace();
}

void StepTimeline::onLog(const LogRecord& /*record*/) { phases_->flush(); }

void StepTimeline::onFitEnd(const FitResult& /*result*/) {
  phases_->flush();
  if (traceSteps_ != 0 && !traceWritten_) writeTrace();
}

void StepTimeline::writeTrace() {
  traceWritten_ = true;
  try {
    std::vector<TraceCounter> counters;
    if (samples_ && !traced_.empty()) {
      const double from = info_.unixTimeAtOrigin + traced_.front().startUs * 1e-6 - 2.0;
      counters = countersOf(samples_->since(from));
    }
    detail::writeFileAtomically(tracePath_, {chromeTraceJson(traced_, rank_, info_.unixTimeAtOrigin, counters)},
                                detail::Durability::kProcessCrash);
  } catch (const std::exception& e) { detail::warnOnce(warned_, "writing the timeline", e.what()); }
  traced_.clear();
  traced_.shrink_to_fit();
}

}  // namespace lockstep

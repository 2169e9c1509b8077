// The pure parts of pipeline parallelism: schedules, balancing layers over stages, checking options.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/pipeline/pipeline.h"

namespace lockstep {

namespace {

constexpr EnumName<PipelineSchedule> kScheduleNames[] = {{PipelineSchedule::kGpipe, "gpipe"},
                                                         {PipelineSchedule::k1f1b, "1f1b"}};

/// The smallest largest-stage sum over contiguous splits of `w` into `stages` non-empty parts.
int64_t bestBottleneck(const std::vector<int64_t>& w, int stages) {
  const size_t n = w.size();
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + w[i];
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[k][i]: the first i layers in k stages.
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages) + 1, std::vector<int64_t>(n + 1, kInf));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (size_t i = static_cast<size_t>(k); i <= n; ++i) {
      for (size_t j = static_cast<size_t>(k - 1); j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        best[k][i] = std::min(best[k][i], std::max(best[k - 1][j], prefix[i] - prefix[j]));
      }
    }
  }
  return best[static_cast<size_t>(stages)][n];
}

}  // namespace

const char* toString(PipelineSchedule schedule) { return enumName(kScheduleNames, schedule); }

PipelineSchedule parsePipelineSchedule(const std::string& text, const std::string& what) {
  return parseEnum(kScheduleNames, text, what);
}

std::vector<PipelineOp> pipelineSchedule(PipelineSchedule schedule, int stages, int stage, int micro) {
  LOCKSTEP_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro >= 1, "pipelineSchedule: stage ", stage, " of ",
                 stages, " over ", micro, " micro-batch(es) is not a pipeline");
  std::vector<PipelineOp> ops;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int m = 0; m < micro; ++m) ops.push_back({PipelineOp::kForward, m});
    for (int m = 0; m < micro; ++m) ops.push_back({PipelineOp::kBackward, m});
    return ops;
  }
  // 1F1B: fill with the forwards the later stages need, then alternate, then drain.
  const int warmup = std::min(stages - stage - 1, micro);
  for (int m = 0; m < warmup; ++m) ops.push_back({PipelineOp::kForward, m});
  for (int i = 0; i < micro - warmup; ++i) {
    ops.push_back({PipelineOp::kForward, warmup + i});
    ops.push_back({PipelineOp::kBackward, i});
  }
  for (int m = micro - warmup; m < micro; ++m) ops.push_back({PipelineOp::kBackward, m});
  return ops;
}

int peakMicrobatchesInFlight(const std::vector<PipelineOp>& ops) {
  int live = 0, peak = 0;
  for (const auto& op : ops) {
    live += op.kind == PipelineOp::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

std::vector<int64_t> balanceByParameters(const std::vector<int64_t>& layerElements, int stages) {
  const auto n = static_cast<int64_t>(layerElements.size());
  LOCKSTEP_CHECK(stages >= 1 && stages <= n, "balanceByParameters: ", stages, " stage(s) for ", n, " layer(s)");
  const int64_t limit = bestBottleneck(layerElements, stages);
  // Greedy from the first stage: take layers while the stage stays within the optimum and every
  // later stage keeps at least one layer. The optimum guarantees the rest fits.
  std::vector<int64_t> balance;
  int64_t next = 0;
  for (int s = 0; s < stages; ++s) {
    const int64_t left = stages - s - 1;
    int64_t sum = layerElements[static_cast<size_t>(next)], count = 1;
    while (next + count < n - left && sum + layerElements[static_cast<size_t>(next + count)] <= limit) {
      sum += layerElements[static_cast<size_t>(next + count)];
      ++count;
    }
    if (s + 1 == stages) count = n - next;
    balance.push_back(count);
    next += count;
  }
  return balance;
}

void checkPipelineOptions(const PipelineOptions& o, int64_t layerCount, int world) {
  if (o.stages < 1) {
    throw ConfigError(fmt::format("parallel.pipeline must be at least 1 (stages of the pipeline), got {}", o.stages));
  }
  if (world % o.stages != 0) {
    throw ConfigError(fmt::format(
        "parallel.pipeline {} does not divide the {} worker(s): the world is pipelines x stages, so run a multiple "
        "of {} workers or change parallel.pipeline",
        o.stages, world, o.stages));
  }
  if (o.stages > layerCount) {
    throw ConfigError(fmt::format("parallel.pipeline {} asks for more pipeline stages than the model's {} layer(s)",
                                  o.stages, layerCount));
  }
  if (o.microbatches < 0) {
    throw ConfigError(
        fmt::format("parallel.microbatches must be at least 1 (0: 4 x parallel.pipeline), got {}", o.microbatches));
  }
  if (o.balance.empty()) return;
  if (static_cast<int64_t>(o.balance.size()) != o.stages) {
    throw ConfigError(fmt::format("parallel.balance has {} entries; expected one per pipeline stage ({})",
                                  o.balance.size(), o.stages));
  }
  for (size_t s = 0; s < o.balance.size(); ++s) {
    if (o.balance[s] < 1) {
      throw ConfigError(
          fmt::format("parallel.balance[{}] is {}: every pipeline stage needs at least one layer", s, o.balance[s]));
    }
  }
  const int64_t sum = std::accumulate(o.balance.begin(), o.balance.end(), int64_t{0});
  if (sum != layerCount) {
    throw ConfigError(
        fmt::format("parallel.balance sums to {} layers, but the model has {} layer(s)", sum, layerCount));
  }
}

}  // namespace lockstep

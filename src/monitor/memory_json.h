// memory_json.h — each rank's memory (FitResult::memory) as JSON, the one
// shape of it in run.json (the dashboard) and in --result-json (internal).
#pragma once

#include <vector>

#include "lockstep/train/strategy.h"

namespace lockstep::detail {

/// [{"rank", "parameter_bytes", "gradient_bytes", "optimizer_bytes",
///   "comm_buffer_bytes", "step_peak_bytes" (null when not tracked), "peak_rss_bytes",
///   "activation_peak_bytes" (pipeline stages only)}, ...]
/// Json: nlohmann::json or nlohmann::ordered_json.
template <typename Json>
Json rankMemoryJson(const std::vector<RankMemory>& memory) {
  Json ranks = Json::array();
  for (const RankMemory& m : memory) {
    Json rank = Json::object();
    rank["rank"] = m.rank;
    rank["parameter_bytes"] = m.parameterBytes;
    rank["gradient_bytes"] = m.gradientBytes;
    rank["optimizer_bytes"] = m.optimizerBytes;
    rank["comm_buffer_bytes"] = m.commBufferBytes;
    rank["step_peak_bytes"] = m.stepPeakBytes < 0 ? Json(nullptr) : Json(m.stepPeakBytes);
    rank["peak_rss_bytes"] = m.peakRssBytes;
    if (m.activationPeakBytes >= 0) rank["activation_peak_bytes"] = m.activationPeakBytes;
    ranks.push_back(std::move(rank));
  }
  return ranks;
}

}  // namespace lockstep::detail

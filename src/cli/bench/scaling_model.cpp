// The arithmetic of scaling_model.h.
#include "cli/bench/scaling_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <utility>

#include "lockstep/common/error.h"

namespace lockstep::cli {

namespace {

/// "2.5gbit" -> {2.5, "gbit"}; nullopt when the text does not start with a number.
std::optional<std::pair<double, std::string>> numberAndUnit(const std::string& text) {
  size_t end = 0;
  try {
    const double value = std::stod(text, &end);
    if (!std::isfinite(value)) return std::nullopt;
    return std::make_pair(value, text.substr(end));
  } catch (const std::exception&) { return std::nullopt; }
}

/// "10gbit" -> 1e10 bits/s; -1 when not a rate.
double parseRate(const std::string& text) {
  auto parsed = numberAndUnit(text);
  if (!parsed) return -1;
  std::string unit = parsed->second;
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const double scale = unit == "gbit" ? 1e9 : unit == "mbit" ? 1e6 : unit == "kbit" ? 1e3 : -1;
  return scale > 0 && parsed->first > 0 ? parsed->first * scale : -1;
}

/// "50us" / "1ms" / "0.2ms" -> seconds; -1 when not a duration.
double parseLatency(const std::string& text) {
  auto parsed = numberAndUnit(text);
  if (!parsed) return -1;
  const std::string& unit = parsed->second;
  const double scale = unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : unit == "s" ? 1 : -1;
  return scale > 0 && parsed->first >= 0 ? parsed->first * scale : -1;
}

}  // namespace

const char* toString(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving-doubling";
    case AllreduceAlgorithm::kFastest: return "ring or halving-doubling, whichever is faster";
  }
  return "?";
}

double parseLatencySeconds(const std::string& text, const std::string& flag) {
  double seconds = parseLatency(text);
  if (seconds < 0) {
    throw ConfigError(fmt::format("{} '{}': expected a duration such as 25us, 0.2ms or 0s", flag, text));
  }
  return seconds;
}

std::vector<LinkSpec> parseLinks(const std::string& text, double defaultLatencySeconds) {
  std::vector<LinkSpec> links;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t at = item.find('@');
    LinkSpec link;
    link.name = item;
    link.bitsPerSecond = parseRate(item.substr(0, at));
    link.latencySeconds = at == std::string::npos ? defaultLatencySeconds : parseLatency(item.substr(at + 1));
    if (link.bitsPerSecond <= 0 || link.latencySeconds < 0) {
      throw ConfigError(
          fmt::format("--link '{}': expected comma-separated link speeds such as 10gbit, 1gbit, 100mbit, each "
                      "optionally with a one-way latency per message (25gbit@20us, 1gbit@0.2ms)",
                      item));
    }
    links.push_back(link);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return links;
}

SoftwareCost fitSoftwareCost(const std::vector<std::pair<int64_t, double>>& timings) {
  SoftwareCost cost;
  double n = 0, sb = 0, ss = 0, sbb = 0, sbs = 0;
  for (const auto& [bytes64, seconds] : timings) {
    const double bytes = static_cast<double>(bytes64), s = std::max(0.0, seconds);
    n += 1;
    sb += bytes;
    ss += s;
    sbb += bytes * bytes;
    sbs += bytes * s;
  }
  if (n == 0) return cost;
  const double denominator = n * sbb - sb * sb;
  if (n >= 2 && denominator > 1e-9 * sbb * n) {
    const double slope = (n * sbs - sb * ss) / denominator;
    const double intercept = (ss - slope * sb) / n;
    if (slope > 0 && intercept >= 0) {
      cost.perByteSeconds = slope;
      cost.perCallSeconds = intercept;
      return cost;
    }
    if (slope > 0) {  // a line through zero: all of it per byte
      cost.perByteSeconds = sbs / sbb;
      return cost;
    }
  }
  cost.perByteSeconds = sb > 0 ? ss / sb : 0;
  return cost;
}

double allreduceSeconds(AllreduceAlgorithm algorithm, int64_t bytes, int workers, const LinkSpec& link,
                        double perByteSeconds) {
  if (workers < 2) return 0;
  if (algorithm == AllreduceAlgorithm::kFastest) {
    return std::min(allreduceSeconds(AllreduceAlgorithm::kRing, bytes, workers, link, perByteSeconds),
                    allreduceSeconds(AllreduceAlgorithm::kHalvingDoubling, bytes, workers, link, perByteSeconds));
  }
  const double n = workers;
  const double hops = algorithm == AllreduceAlgorithm::kRing ? 2 * (n - 1) : 2 * std::ceil(std::log2(n));
  const double moved = 2 * (n - 1) / n * static_cast<double>(bytes);
  return hops * link.latencySeconds + moved * (8 / link.bitsPerSecond + perByteSeconds);
}

Prediction predict(const ModelInputs& in, const LinkSpec& link, int workers) {
  Prediction p;
  p.workers = workers;
  p.link = link.name;
  const double singleRate = in.single.samplesPerSecond;
  const double localBatch = static_cast<double>(in.single.globalBatch) / std::max(1, in.single.workers);
  if (workers == 1) {
    p.computeSeconds = in.single.computeSeconds();
    p.stepSeconds = singleRate > 0 ? localBatch / singleRate : p.computeSeconds;
    p.samplesPerSecond = singleRate;
    p.efficiency = 1;
    return p;
  }
  // CPU sharing of emulated hosts, relative to what the two-worker profile already had.
  auto sharing = [&](int n) {
    return in.sharedCores > 0 ? std::max(1.0, static_cast<double>(n * in.pair.threadsPerWorker) / in.sharedCores) : 1.0;
  };
  const double stretch = sharing(workers) / sharing(in.pair.workers);
  const double perByte = in.software.perByteSeconds;

  const double backward = in.pair.backward * stretch;
  double channelFree = 0;  // after backward's start
  for (const auto& bucket : in.pair.buckets) {
    const double ready = std::clamp(bucket.readySeconds * stretch, 0.0, backward);
    const double fixed = std::max(0.0, bucket.commSeconds - perByte * static_cast<double>(bucket.bytes));
    const double seconds = fixed + allreduceSeconds(in.algorithm, bucket.bytes, workers, link, perByte);
    channelFree = std::max(channelFree, ready) + seconds;
    p.commSeconds += seconds;
  }
  p.exposedSeconds = std::max(0.0, channelFree - backward);
  p.computeSeconds = in.pair.computeSeconds() * stretch;
  p.stepSeconds = p.computeSeconds + p.exposedSeconds;
  p.samplesPerSecond = workers * localBatch / p.stepSeconds;
  p.efficiency = singleRate > 0 ? p.samplesPerSecond / (workers * singleRate) : 0;
  return p;
}

}  // namespace lockstep::cli

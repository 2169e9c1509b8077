// The search space's sampling, grids and value texts (search_space.h).
#include "sweep/search_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lockstep/common/error.h"

namespace lockstep::sweep {

int64_t Param::gridSize() const {
  switch (kind) {
    case ParamKind::kChoice: return static_cast<int64_t>(values.size());
    case ParamKind::kInt: return points > 0 ? points : static_cast<int64_t>(high - low) + 1;
    case ParamKind::kUniform:
    case ParamKind::kLogUniform: return points;
  }
  return 0;
}

double Param::gridValue(int64_t i) const {
  if (kind == ParamKind::kChoice) return static_cast<double>(i);
  if (kind == ParamKind::kInt && points == 0) return low + static_cast<double>(i);
  double t = points > 1 ? static_cast<double>(i) / static_cast<double>(points - 1) : 0.5;
  double v = logScale() ? std::exp(std::log(low) + t * (std::log(high) - std::log(low))) : low + t * (high - low);
  if (kind == ParamKind::kInt) return std::round(v);
  // 12 significant digits: a log grid from 0.001 to 0.1 visits 0.01, not 0.010000000000000004.
  return std::stod(fmt::format("{:.12g}", v));
}

double Param::sample(std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double t = unit(rng);
  switch (kind) {
    case ParamKind::kChoice:
      return std::min(std::floor(t * static_cast<double>(values.size())), static_cast<double>(values.size() - 1));
    case ParamKind::kUniform: return low + t * (high - low);
    case ParamKind::kLogUniform: return std::exp(std::log(low) + t * (std::log(high) - std::log(low)));
    case ParamKind::kInt: {
      // Every integer equally likely (or equally likely per log unit): draw over [low-0.5, high+0.5).
      double lo = low - 0.5, hi = high + 0.5;
      double v = log ? std::exp(std::log(lo) + t * (std::log(hi) - std::log(lo))) : lo + t * (hi - lo);
      return std::clamp(std::round(v), low, high);
    }
  }
  return low;
}

std::string SearchSpace::valueText(size_t i, double value) const {
  const Param& p = params.at(i);
  switch (p.kind) {
    case ParamKind::kChoice: return p.values.at(static_cast<size_t>(value));
    case ParamKind::kInt: return fmt::format("{}", static_cast<int64_t>(std::llround(value)));
    default: return fmt::format("{}", value);  // shortest text that reads back to the same double
  }
}

std::vector<std::string> SearchSpace::overrides(const Point& point) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params.size(); ++i) out.push_back(params[i].key + "=" + valueText(i, point.at(i)));
  return out;
}

Point SearchSpace::parsePoint(const std::vector<std::string>& texts) const {
  if (texts.size() != params.size()) {
    throw ConfigError(
        fmt::format("a recorded trial has {} parameters, the spec's space {}", texts.size(), params.size()));
  }
  Point point;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    auto notInSpace = [&] {
      return ConfigError(fmt::format("a recorded trial has {}={}, which is not in the spec's space", p.key, texts[i]));
    };
    if (p.kind == ParamKind::kChoice) {
      auto it = std::find(p.values.begin(), p.values.end(), texts[i]);
      if (it == p.values.end()) throw notInSpace();
      point.push_back(static_cast<double>(it - p.values.begin()));
      continue;
    }
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(texts[i], &used);
      if (used != texts[i].size()) throw notInSpace();
    } catch (const std::logic_error&) { throw notInSpace(); }
    if (v < p.low || v > p.high) throw notInSpace();
    point.push_back(v);
  }
  return point;
}

std::mt19937_64 trialRng(uint64_t seed, int64_t index) {
  // splitmix64 of (seed, index): neighbouring seeds and indices give unrelated streams.
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return std::mt19937_64(z ^ (z >> 31));
}

}  // namespace lockstep::sweep

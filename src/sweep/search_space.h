// search_space.h — the hyper-parameters a sweep searches: one entry per
// config key, with its distribution (docs/sweeps.md#the-space).
//
// A point of the space is one double per parameter, in spec order: the
// value itself for uniform, loguniform and int (an integral double), the
// index of the chosen value for choice. `valueText` turns it into the text
// of a `key=value` override (YAML, so a choice may be a list); the text is
// what a trial records and what `parsePoint` reads back on --resume.
// Sampling takes the caller's generator: the same seed gives the same points.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lockstep::sweep {

enum class ParamKind { kChoice, kUniform, kLogUniform, kInt };

struct Param {
  std::string key;  ///< a `lockstep train` config key, e.g. optimizer.lr
  ParamKind kind = ParamKind::kUniform;
  std::vector<std::string> values;  ///< kChoice: each value as flow YAML text
  double low = 0;                   ///< kUniform, kLogUniform, kInt: inclusive bounds
  double high = 0;
  bool log = false;    ///< kInt: sampled uniformly in log space
  int64_t points = 0;  ///< grid: points of a uniform/loguniform range (0: not griddable)
  /// How many distinct values grid search visits (values, high-low+1 or points; 0: not griddable).
  int64_t gridSize() const;
  /// The i-th grid value (0 <= i < gridSize()).
  double gridValue(int64_t i) const;
  /// A value drawn from the parameter's prior (uniform in its own or its log space).
  double sample(std::mt19937_64& rng) const;
  /// Whether the TPE works in log space for this parameter.
  bool logScale() const { return kind == ParamKind::kLogUniform || (kind == ParamKind::kInt && log); }
};

using Point = std::vector<double>;

struct SearchSpace {
  std::vector<Param> params;

  /// The override text of parameter i at `value` ("0.001", "64", "[512, 256]").
  std::string valueText(size_t i, double value) const;
  /// `key=text` for every parameter: what a trial adds to the base config.
  std::vector<std::string> overrides(const Point& point) const;
  /// The point whose value texts are `texts` (in spec order); ConfigError naming the key when a
  /// text is not a value of the space (a changed spec under --resume).
  Point parsePoint(const std::vector<std::string>& texts) const;
};

/// A generator for trial `index` of a sweep seeded with `seed`: trial i draws the same numbers
/// whatever ran before it or beside it.
std::mt19937_64 trialRng(uint64_t seed, int64_t index);

}  // namespace lockstep::sweep

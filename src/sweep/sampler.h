// sampler.h — where the next trial goes: grid, random, or a Tree-structured
// Parzen Estimator (docs/sweeps.md#algorithms).
//
// suggest(index, finished) is a pure function of the spec, the trial's index
// and the finished trials given: the same history gives the same point, which
// is what lets --resume reproduce a sweep. Objectives arrive as "lower is
// better" (a maximised metric negated by the caller).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sweep/search_space.h"
#include "sweep/sweep_spec.h"

namespace lockstep::sweep {

struct Observation {
  Point point;
  double loss = 0;    ///< the objective, lower is better
  int64_t rungs = 0;  ///< early_stop: rungs finished; a trial further up ranks before any below it
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual Point suggest(int64_t index, const std::vector<Observation>& finished) = 0;
};

/// Trial i of a grid: the i-th point of the grid in spec order, the last parameter fastest.
Point gridPoint(const SearchSpace& space, int64_t index);
/// Trial i of a random search: each parameter drawn from its prior with trialRng(seed, i).
Point randomPoint(const SearchSpace& space, uint64_t seed, int64_t index);

/// The univariate TPE (Bergstra et al. 2011): the finished trials are split into the best
/// gamma-share ("good", at most 25) and the rest; per parameter, a Parzen estimator
/// l(x) over the good and g(x) over the rest (each with a wide prior component, truncated to the
/// range, in log space for log-scale parameters; categorical: counts plus a uniform prior);
/// `candidates` draws from l, the one with the largest l(x)/g(x) wins. Random for the first
/// startupTrials trials.
Point tpePoint(const SearchSpace& space, const TpeOptions& options, uint64_t seed, int64_t index,
               const std::vector<Observation>& finished);

std::unique_ptr<Sampler> makeSampler(const SweepSpec& spec);

}  // namespace lockstep::sweep

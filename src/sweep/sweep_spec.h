// sweep_spec.h — `lockstep sweep SPEC.yaml`: what a sweep searches and how
// (docs/sweeps.md#the-spec).
//
//   base: ../../configs/mlp-bench.yaml      # any `lockstep train` config, relative to the spec
//   overrides: {trainer.max_steps: 200}     # fixed changes to it (optional)
//   space:
//     optimizer.lr: {type: loguniform, low: 1.0e-4, high: 0.3}
//     trainer.batch_size: {type: choice, values: [32, 64, 128]}
//   objective: {metric: validation_accuracy, mode: max}
//   budget: {trials: 20, seconds: 600}      # either or both; grid: trials defaults to the grid
//   algorithm: tpe                          # grid | random | tpe
//   seed: 1
//   workers_per_trial: 1
//   early_stop: {type: asha, resource: epochs, min_resource: 1, max_resource: 9, reduction_factor: 3}
//
// loadSweepSpec checks everything a sweep can know before it starts: unknown
// keys (in the spec and in the space), empty or inverted ranges,
// loguniform bounds <= 0, each choice value and each range's bounds applied
// to the base config, a metric the base config's task never reports, a
// budget that never ends. Every failure is a ConfigError naming the spec
// file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sweep/search_space.h"

namespace lockstep::sweep {

enum class Algorithm { kGrid, kRandom, kTpe };
enum class Metric { kValidationLoss, kValidationAccuracy, kTrainLoss };

struct TpeOptions {
  int64_t startupTrials = 10;  ///< random trials before the model is used
  int64_t candidates = 24;     ///< draws from the good trials' density per parameter
  double gamma = 0.1;          ///< share of finished trials counted as good (at most 25)
  bool multivariate = true;    ///< one joint kernel per trial (false: every parameter on its own)
};

/// Asynchronous successive halving (Li et al. 2018): every trial first trains min_resource epochs
/// (or steps); a trial among the best 1/reduction_factor of those that reached a rung goes on to the
/// next rung (resource x reduction_factor, the last one max_resource), resuming from its checkpoint.
struct AshaOptions {
  bool enabled = false;
  bool epochs = true;  ///< resource: epochs (trainer.epochs) or steps (trainer.max_steps)
  int64_t minResource = 1;
  int64_t maxResource = 0;
  int64_t reductionFactor = 3;
  /// The resource at each rung: min, min*eta, min*eta^2, ... below max, then max.
  std::vector<int64_t> rungs() const;
  /// The config key a rung sets: trainer.epochs or trainer.max_steps.
  const char* resourceKey() const { return epochs ? "trainer.epochs" : "trainer.max_steps"; }
};

struct SweepSpec {
  std::string file;                    ///< the spec's path, as given
  std::string base;                    ///< base config path, resolved against the spec's folder
  std::vector<std::string> overrides;  ///< fixed key=value changes to the base
  SearchSpace space;
  Metric metric = Metric::kValidationLoss;
  bool maximize = false;
  int64_t trials = 0;  ///< 0: no trial budget (seconds must bound the sweep)
  double seconds = 0;  ///< 0: no time budget; else no trial starts after this many seconds
  Algorithm algorithm = Algorithm::kRandom;
  TpeOptions tpe;
  AshaOptions asha;  ///< early_stop: {type: asha, ...}
  uint64_t seed = 0;
  int64_t workersPerTrial = 1;

  /// Grid size (product of the parameters' grid sizes); ConfigError naming the first parameter
  /// that has no grid.
  int64_t gridSize() const;
};

/// Reads and checks `path` (see the file comment).
SweepSpec loadSweepSpec(const std::string& path);

const char* toString(Metric metric);
const char* toString(Algorithm algorithm);

/// The config keys a sweep sets for each trial itself (its run and checkpoint directories).
const std::vector<std::string>& sweepOwnedKeys();

}  // namespace lockstep::sweep

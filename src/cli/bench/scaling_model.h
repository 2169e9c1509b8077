// scaling_model.h — the model behind `lockstep bench predict`: step time,
// samples/s and scaling efficiency of N data-parallel workers over a link,
// from two measured profiles (one worker; two workers on this machine).
//
// A step of N workers is the two-worker profile's compute (data wait,
// forward, backward, optimizer, time between steps) plus the communication
// backward does not hide. Each gradient bucket is released at the moment the
// profile saw it released (after backward's start) and allreduced on one
// channel in launch order; one allreduce of b bytes over N workers costs
//   fixed + 2(N-1)/N · b · (β + 8/bps_link) + hops · α_link
// with hops = 2(N-1) for a ring, 2·ceil(log2 N) for halving-doubling. β, the
// backend's own seconds per byte moved (copies, reduction, the TCP stack), is
// measured by an allreduce benchmark between two workers on this machine
// (`lockstep bench allreduce`, where the wire is free); `fixed` is what the
// profiled bucket took beyond its bytes (the backend's per-call cost, waiting
// for the other worker), so two workers on a free link replay the profile.
// Wire and software costs add: on busy cores the copies do not overlap the
// transfer (measured on the emulated links; docs/performance.md).
// Pure arithmetic: no processes, no tensors (tests/cli/test_scaling_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::cli {

/// One gradient bucket as a profiled step released and communicated it.
struct ProfiledBucket {
  int64_t bytes = 0;
  double readySeconds = 0;  ///< after backward's start
  double commSeconds = 0;   ///< its service time on the profiled link
};

/// One profiled run: rank 0's per-step means (a `lockstep train --result-json` file).
struct StepProfile {
  int workers = 1;
  int threadsPerWorker = 1;
  int64_t globalBatch = 0;
  double samplesPerSecond = 0;
  double dataWait = 0, forward = 0, backward = 0,
         optimizer = 0;     ///< the phases but comm wait, which the model replaces
  double betweenSteps = 0;  ///< wall time per step outside the phases (logging, checkpoints)
  std::vector<ProfiledBucket> buckets;

  double computeSeconds() const { return dataWait + forward + backward + optimizer + betweenSteps; }
};

/// A link: "10gbit", "1gbit", "100mbit", "25gbit@50us" (rate, then one-way latency per message).
struct LinkSpec {
  std::string name;
  double bitsPerSecond = 0;
  double latencySeconds = 0;
};

/// "10gbit,1gbit@20us" -> links; ConfigError naming --link otherwise. `defaultLatency` where none is given.
std::vector<LinkSpec> parseLinks(const std::string& text, double defaultLatencySeconds);

/// Gloo's allreduce across hosts is a ring (c10d's; up to 64 KB lockstep's one round of whole
/// buffers, whose latency the ring's overstates); OpenMPI picks per message size (kFastest: the
/// cheaper of the two).
enum class AllreduceAlgorithm { kRing, kHalvingDoubling, kFastest };
const char* toString(AllreduceAlgorithm algorithm);

/// "50us", "0.2ms", "0s" -> seconds; ConfigError naming `flag` otherwise.
double parseLatencySeconds(const std::string& text, const std::string& flag);

/// The backend's own cost of moving bytes, fitted to allreduce timings between two workers.
struct SoftwareCost {
  double perByteSeconds = 0;  ///< β: per byte each worker moves
  double perCallSeconds = 0;  ///< the line's intercept: one allreduce's fixed cost (shown, not used)
};

/// The least-squares line through (bytes, seconds) of two-worker allreduces (each worker moves
/// the b bytes once); slope and intercept never negative. ConfigError-free: fewer than two
/// distinct sizes give all of it per byte.
SoftwareCost fitSoftwareCost(const std::vector<std::pair<int64_t, double>>& timings);

/// Seconds of one allreduce of `bytes` over `workers` on `link`, its fixed part aside.
double allreduceSeconds(AllreduceAlgorithm algorithm, int64_t bytes, int workers, const LinkSpec& link,
                        double perByteSeconds);

struct ModelInputs {
  StepProfile single;  ///< one worker
  StepProfile pair;    ///< two workers on this machine
  SoftwareCost software;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  /// Emulated hosts sharing this machine: every worker's compute stretches by
  /// max(1, N·threads/sharedCores) over the profile's own sharing (the backend's cost does not:
  /// measured, it did not). 0: each worker has its own cores.
  int sharedCores = 0;
};

struct Prediction {
  int workers = 0;
  std::string link;
  double stepSeconds = 0;
  double computeSeconds = 0;
  double commSeconds = 0;     ///< the allreduces' total service time
  double exposedSeconds = 0;  ///< of it, after backward ended
  double samplesPerSecond = 0;
  double efficiency = 0;  ///< samples/s over workers × the single worker's samples/s
};

Prediction predict(const ModelInputs& in, const LinkSpec& link, int workers);

}  // namespace lockstep::cli

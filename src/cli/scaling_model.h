// scaling_model.h — the model behind `lockstep bench predict`: step time,
// samples/s and scaling efficiency of N data-parallel workers over a link,
// from two measured profiles (one worker; two workers on this machine).
//
// A step of N workers is the two-worker profile's compute (data wait,
// forward, backward, optimizer, time between steps) plus the communication
// backward does not hide. Each gradient bucket is released at the moment the
// profile saw it released (after backward's start) and allreduced on one
// channel in launch order; one allreduce of b bytes costs
//   ring:              2(N-1)·(α_link + α_sw) + 2(N-1)/N · b · (8/bps_link + β_sw)
//   halving-doubling:  2·log2(N)·(α_link + α_sw) + 2(N-1)/N · b · (8/bps_link + β_sw)
// where α_sw and β_sw (seconds per message hop and per byte moved) are the
// backend's own costs — copies, reduction, the TCP stack — fitted to the
// two-worker profile's bucket service times on this machine, where the wire is
// free. Wire and software costs add: on busy cores the copies do not overlap
// the transfer (measured on the emulated links; docs/performance.md).
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
  double dataWait = 0, forward = 0, backward = 0, commWait = 0, optimizer = 0;
  double stepSeconds = 0;   ///< the phases' sum
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

/// Gloo's allreduce is a ring; OpenMPI picks per message size (kFastest: the cheaper of the two).
enum class AllreduceAlgorithm { kRing, kHalvingDoubling, kFastest };
const char* toString(AllreduceAlgorithm algorithm);

/// "50us", "0.2ms", "0s" -> seconds; ConfigError naming `flag` otherwise.
double parseLatencySeconds(const std::string& text, const std::string& flag);

/// The backend's own cost of moving bytes, fitted to a profile's buckets.
struct SoftwareCost {
  double perMessageSeconds = 0;  ///< α_sw, per hop
  double perByteSeconds = 0;     ///< β_sw, per byte each worker moves
  bool fitted = false;           ///< false: no buckets to fit (one worker), costs are 0
};

/// Fits α_sw and β_sw to `pair`'s bucket service times (a two-worker run: one hop each way,
/// each worker moves b bytes): least squares over the buckets when their sizes differ, else
/// all per byte; never negative.
SoftwareCost fitSoftwareCost(const StepProfile& pair);

/// Seconds of one allreduce of `bytes` over `workers` on `link`.
double allreduceSeconds(AllreduceAlgorithm algorithm, int64_t bytes, int workers, const LinkSpec& link,
                        const SoftwareCost& software);

struct ModelInputs {
  StepProfile single;  ///< one worker
  StepProfile pair;    ///< two workers on this machine
  SoftwareCost software;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  /// Emulated hosts sharing this machine: every worker's compute (and the software cost) stretches
  /// by max(1, N·threads/sharedCores) over the profile's own sharing. 0: each worker has its own cores.
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

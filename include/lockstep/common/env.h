// lockstep/common/env.h — how lockstep reads environment variables.
//
// Every variable lockstep understands is listed in docs/environment.md and
// read through Environment, so tests can feed a map instead of the process
// environment and every parse error names the variable and the bad value.
// Two are read with getenv: the log level as the library loads (init() reads
// it again through Environment; common/logging.h) and the NVML library the GPU
// sampler opens.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace lockstep {

class Environment {
 public:
  /// A snapshot of the current process environment.
  static Environment fromProcess();
  /// An environment made of exactly these variables (tests).
  explicit Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}

  /// The value, or nullopt when unset. An empty value counts as set.
  std::optional<std::string> get(const std::string& name) const;
  bool has(const std::string& name) const { return vars_.count(name) != 0; }
  /// Parses a base-10 integer; throws ConfigError naming `name` when malformed or out of [lo, hi].
  std::optional<int64_t> getInt(const std::string& name, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  /// Parses seconds as a decimal number ("30", "0.5"); throws ConfigError when malformed or negative.
  std::optional<std::chrono::milliseconds> getSeconds(const std::string& name) const;

  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

/// Parses a base-10 integer from `text` strictly (the whole string); throws
/// ConfigError mentioning `what` on failure or when outside [lo, hi].
int64_t parseInt(const std::string& text, const std::string& what, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);

/// Variables lockstep reads. The launcher sets the world's, the thread count, the timeout, the
/// backend, the interface and the restart count for its workers; the others are the user's.
namespace env {
inline constexpr const char* kRank = "LOCKSTEP_RANK";
inline constexpr const char* kWorldSize = "LOCKSTEP_WORLD_SIZE";
inline constexpr const char* kLocalRank = "LOCKSTEP_LOCAL_RANK";
inline constexpr const char* kLocalWorldSize = "LOCKSTEP_LOCAL_WORLD_SIZE";
inline constexpr const char* kNodeRank = "LOCKSTEP_NODE_RANK";
inline constexpr const char* kMasterAddr = "LOCKSTEP_MASTER_ADDR";
inline constexpr const char* kMasterPort = "LOCKSTEP_MASTER_PORT";
inline constexpr const char* kNumThreads = "LOCKSTEP_NUM_THREADS";
inline constexpr const char* kCommTimeout = "LOCKSTEP_COMM_TIMEOUT";
inline constexpr const char* kLogLevel = "LOCKSTEP_LOG_LEVEL";
inline constexpr const char* kBackend = "LOCKSTEP_BACKEND";
inline constexpr const char* kIface = "LOCKSTEP_IFACE";
inline constexpr const char* kRestartCount = "LOCKSTEP_RESTART_COUNT";
/// Where the job's store listens (its server: the launcher, else rank 0); default the master address.
inline constexpr const char* kStoreBind = "LOCKSTEP_STORE_BIND";
/// 1: the launcher serves the job's store at the master address for as long as the job runs,
/// so that it outlives any worker; every worker, rank 0 too, connects to it.
inline constexpr const char* kAgentStore = "LOCKSTEP_AGENT_STORE";
/// Megabytes of freed tensor blocks the CPU allocator keeps for reuse (common/tensor_memory.h).
inline constexpr const char* kCpuCacheMb = "LOCKSTEP_CPU_CACHE_MB";
/// 1: the built-in convnet pools with LibTorch's relu + max_pool2d instead of
/// lockstep::reluMaxPool2x2 (nn/pooling.h) — same bits, for comparing kernels; 0 or unset: ours.
inline constexpr const char* kPlainPooling = "LOCKSTEP_PLAIN_POOLING";
}  // namespace env

}  // namespace lockstep

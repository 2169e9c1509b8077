// commands.h — the subcommands of the `lockstep` binary.
#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int runCommand(const std::vector<std::string>& args);
int benchCommand(const std::vector<std::string>& args);
int trainCommand(const std::vector<std::string>& args);
int generateCommand(const std::vector<std::string>& args);

struct AllreduceBenchOptions {
  std::vector<int64_t> sizes;  ///< bytes
  std::string dtype = "float32";
  std::string op = "sum";
  int iters = 0;   ///< 0: chosen per size
  int warmup = 3;
  bool json = false;
  bool check = true;
};
int benchAllreduce(const AllreduceBenchOptions& options);

/// `lockstep bench loader CONFIG [key=value ...] [--batches N]`.
int benchLoader(const std::vector<std::string>& args);

/// "4", "4K", "1M", "64MiB", "2G" -> bytes. Throws ConfigError naming `what`.
int64_t parseBytes(const std::string& text, const std::string& what);

}  // namespace lockstep::cli

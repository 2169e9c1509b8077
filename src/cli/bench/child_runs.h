// child_runs.h — what the benchmarks that run `lockstep run ... lockstep train`
// children share: starting one with its output in a log, quoting its command
// line, the end of its log for error messages, a --np list, a scratch directory.
#pragma once

#include <string>
#include <vector>

#include "common/shell_text.h"

namespace lockstep::cli {

/// Runs argv with stdout and stderr into `logPath`; returns the exit code (128+signal when killed).
int runLogged(const std::vector<std::string>& argv, const std::string& logPath);
/// The last `count` lines of a file, each indented by four spaces.
inline std::string lastLines(const std::string& path, size_t count) { return detail::lastLines(path, count, "    "); }
using detail::shellJoin;  ///< argv as one shell-quoted line (for logs and error messages)
/// "1,2,4" -> {1, 2, 4}; ConfigError naming --np otherwise.
std::vector<int> parseWorldSizes(const std::string& text);
/// A new directory under the temporary directory, named prefix-XXXXXX; Error when it cannot be made.
std::string makeScratchDir(const std::string& prefix);

/// One measured training run of a benchmark:
///   SELF run -np WORKERS --threads THREADS RUNFLAGS -- SELF train CONFIG OVERRIDES
///       trainer.validate=false checkpoint.resume=none checkpoint.dir=off monitor.dir=off
///       generate.samples=0 EXTRA --result-json RESULT
/// (EXTRA after the fixed overrides, so a benchmark can set any of them again).
struct TrainChild {
  int workers = 1;
  int threads = 1;
  std::vector<std::string> runFlags;  ///< e.g. {"--backend", "gloo"}
  std::string config;
  std::vector<std::string> overrides;  ///< the user's
  std::vector<std::string> extra;      ///< the benchmark's own, e.g. trainer.max_steps=30
  std::string resultPath;
  std::string logPath;
};
/// Runs `child` (the lockstep binary being this process's own), its output in logPath, after
/// logging "lockstep BENCH: WHAT: COMMAND" on stderr; Error naming `what`, the exit code and the
/// log's last lines when it fails.
void runTrainChild(const TrainChild& child, const std::string& bench, const std::string& what);

}  // namespace lockstep::cli

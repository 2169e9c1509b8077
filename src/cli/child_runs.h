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

}  // namespace lockstep::cli

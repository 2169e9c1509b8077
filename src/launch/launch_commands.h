// launch_commands.h — the launcher's internals that are pure functions of
// the options (command lines it builds, checks it makes) and the port and
// program lookups, apart from launch() so tests reach them without processes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/shell_text.h"
#include "lockstep/launch/launcher.h"

namespace lockstep::detail {

/// Throws ConfigError naming the flag when `options` cannot be launched.
void validateLaunchOptions(const LaunchOptions& options);

/// The shell command a -H launcher runs on host `nodeRank` through rsh (for logs and tests).
std::string remoteLaunchCommand(const LaunchOptions& options, int nodeRank, const std::string& selfPath,
                                const std::string& workingDir, const std::map<std::string, std::string>& forwardEnv);
// shellQuote (quoting `word` for a POSIX shell) is in common/shell_text.h.

/// The mpirun command line launch() uses for backend "mpi" (for logs and tests).
std::vector<std::string> mpirunCommand(const LaunchOptions& options, int usableCores, bool asRoot);

/// Finds `program` the way execvp would; empty when it cannot be run.
std::string resolveProgram(const std::string& program);
/// A TCP port on `host` that was free a moment ago.
int pickFreePort(const std::string& host);
/// Whether `host`:`port` can be bound now.
bool portIsFree(const std::string& host, int port);

}  // namespace lockstep::detail

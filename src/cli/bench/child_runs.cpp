// The child-process helpers of child_runs.h (bench scaling, bench memory).
#include "cli/bench/child_runs.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {

/// Runs argv with stdout and stderr into `logPath`; returns the exit code (128+signal when killed).
int runLogged(const std::vector<std::string>& argv, const std::string& logPath) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(fmt::format("waiting for {} failed: {}", argv[0], std::strerror(errno)));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::vector<int> parseWorldSizes(const std::string& text) {
  auto bad = [&] {
    return ConfigError(
        fmt::format("--np '{}': expected a comma-separated list of worker counts of at least 1, "
                    "e.g. --np 1,2,4",
                    text));
  };
  std::vector<int> sizes;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      sizes.push_back(static_cast<int>(parseInt(item, "--np", 1, 4096)));
    } catch (const ConfigError&) { throw bad(); }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

void runTrainChild(const TrainChild& c, const std::string& bench, const std::string& what) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> argv{self, "run", "-np", std::to_string(c.workers), "--threads", std::to_string(c.threads)};
  argv.insert(argv.end(), c.runFlags.begin(), c.runFlags.end());
  argv.insert(argv.end(), {"--", self, "train", c.config});
  argv.insert(argv.end(), c.overrides.begin(), c.overrides.end());
  argv.insert(argv.end(), {"trainer.validate=false", "checkpoint.resume=none", "checkpoint.dir=off", "monitor.dir=off",
                           "generate.samples=0"});
  argv.insert(argv.end(), c.extra.begin(), c.extra.end());
  argv.insert(argv.end(), {"--result-json", c.resultPath});
  std::cerr << fmt::format("lockstep {}: {}: {}\n", bench, what, shellJoin(argv));
  if (int rc = runLogged(argv, c.logPath); rc != 0) {
    throw Error(fmt::format("{} failed (exit code {}); the last lines of its output ({}):\n{}", what, rc, c.logPath,
                            lastLines(c.logPath, 20)));
  }
}

std::string makeScratchDir(const std::string& prefix) {
  const auto tmp = std::filesystem::temp_directory_path();
  std::string dir = (tmp / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(dir.data()) == nullptr) {
    throw Error(fmt::format("cannot create a directory under {}: {}", tmp.string(), std::strerror(errno)));
  }
  return dir;
}

}  // namespace lockstep::cli

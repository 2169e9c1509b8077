// subprocess.h — run a real program from a test and capture what it did.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace lockstep::test {

struct ProcessResult {
  int exitCode = -1;  ///< 128+signal when killed by a signal
  int signal = 0;
  bool timedOut = false;
  std::string out;
  std::string err;
  double seconds = 0;
};

struct ProcessOptions {
  std::map<std::string, std::string> setEnv;  ///< added to (or replacing in) this process's environment
  std::vector<std::string> unsetEnv;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  ///< then SIGKILL, timedOut = true
  std::atomic<pid_t>* pidOut = nullptr;                          ///< receives the child's pid once started
};

ProcessResult runProcess(const std::vector<std::string>& argv, const ProcessOptions& options = {});

/// The built `lockstep` binary (CTest passes LOCKSTEP_BIN).
std::string lockstepBin();
/// A helper program built next to the tests (LOCKSTEP_TEST_HELPER_DIR).
std::string helperBin(const std::string& name);
/// A fresh temporary directory, removed at exit of the process is not guaranteed.
std::string makeTempDir();
/// The whole file ("" when it cannot be read).
std::string readFile(const std::string& path);
/// `s` in single quotes, for `sh -c` command lines built by tests (paths without quotes).
inline std::string quote(const std::string& s) { return "'" + s + "'"; }
/// The last non-empty line of `text` (a `--json` command's document).
inline std::string lastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t start = text.rfind('\n');
  return start == std::string::npos ? text : text.substr(start + 1);
}

}  // namespace lockstep::test

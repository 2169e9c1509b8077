#include "support/subprocess.h"
#include <fstream>
#include <sstream>

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <stdexcept>

#include "launch/child_process.h"
#include "lockstep/common/env.h"

namespace lockstep::test {

ProcessResult runProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  auto env = Environment::fromProcess().vars();
  for (const auto& name : options.unsetEnv) env.erase(name);
  for (const auto& [k, v] : options.setEnv) env[k] = v;
  auto start = std::chrono::steady_clock::now();
  detail::ChildProcess child(argv, env);
  if (options.pidOut) options.pidOut->store(child.pid());
  ProcessResult result;
  char buffer[65536];
  while (child.stdoutFd().valid() || child.stderrFd().valid() || child.running()) {
    if (std::chrono::steady_clock::now() - start > options.timeout) {
      result.timedOut = true;
      child.signalGroup(SIGKILL);
    }
    std::vector<pollfd> fds;
    std::vector<detail::Fd*> owners;
    for (auto* fd : {&child.stdoutFd(), &child.stderrFd()}) {
      if (fd->valid()) {
        fds.push_back(pollfd{fd->get(), POLLIN, 0});
        owners.push_back(fd);
      }
    }
    if (fds.empty()) {
      child.poll();
      if (child.running()) ::usleep(10000);
      continue;
    }
    ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (owners[i] == &child.stdoutFd() ? result.out : result.err).append(buffer, static_cast<size_t>(n));
      } else {
        owners[i]->reset();
      }
    }
    child.poll();
  }
  int status = child.rawStatus();
  if (WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
    result.exitCode = 128 + result.signal;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string lockstepBin() {
  const char* bin = std::getenv("LOCKSTEP_BIN");
  if (!bin) throw std::runtime_error("LOCKSTEP_BIN is not set; run the tests through ctest");
  return bin;
}

std::string helperBin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_TEST_HELPER_DIR");
  if (!dir) throw std::runtime_error("LOCKSTEP_TEST_HELPER_DIR is not set; run the tests through ctest");
  return std::string(dir) + "/" + name;
}

std::string makeTempDir() {
  std::string pattern = "/tmp/lockstep-test-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

}  // namespace lockstep::test

namespace lockstep::test {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace lockstep::test

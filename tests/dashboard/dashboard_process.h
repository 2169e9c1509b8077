// dashboard_process.h — a real `lockstep dashboard` process for tests: started
// on port 0, its URL read from its first stdout line, stopped with SIGTERM.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launch/child_process.h"
#include "lockstep/common/env.h"
#include "support/subprocess.h"

namespace lockstep::test {

class DashboardProcess {
 public:
  /// Starts `lockstep dashboard --logdir LOGDIR --port 0 EXTRA...` and waits
  /// (up to 20 s) for the line with its URL; throws with its output otherwise.
  explicit DashboardProcess(const std::string& logdir, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{lockstepBin(), "dashboard", "--logdir", logdir, "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<detail::ChildProcess>(argv, Environment::fromProcess().vars());
    static const std::regex kUrl(R"(http://127\.0\.0\.1:([0-9]+)/)");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::smatch match;
    while (!std::regex_search(out_, match, kUrl)) {
      if (std::chrono::steady_clock::now() > deadline || !drain(200)) {
        throw std::runtime_error("lockstep dashboard printed no URL; stdout: " + out_ + "\nstderr: " + err_);
      }
    }
    port_ = std::stoi(match[1].str());
  }

  ~DashboardProcess() {
    if (child_ && child_->running()) stop();
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  /// SIGTERM, then waits up to 10 s; returns the exit code (128+signal when killed).
  int stop() {
    ::kill(child_->pid(), SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (child_->running() && std::chrono::steady_clock::now() < deadline) {
      drain(50);
      child_->poll();
    }
    if (child_->running()) {
      child_->signalGroup(SIGKILL);
      while (child_->running()) {
        drain(50);
        child_->poll();
      }
    }
    int status = child_->rawStatus();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  /// Reads what the child wrote within `ms`; false once both pipes closed.
  bool drain(int ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<detail::Fd*, std::string*>> owners;
    if (child_->stdoutFd().valid()) {
      fds.push_back(pollfd{child_->stdoutFd().get(), POLLIN, 0});
      owners.emplace_back(&child_->stdoutFd(), &out_);
    }
    if (child_->stderrFd().valid()) {
      fds.push_back(pollfd{child_->stderrFd().get(), POLLIN, 0});
      owners.emplace_back(&child_->stderrFd(), &err_);
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return false;
    }
    ::poll(fds.data(), fds.size(), ms);
    char buffer[65536];
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0)
        owners[i].second->append(buffer, static_cast<size_t>(n));
      else
        owners[i].first->reset();
    }
    return true;
  }

  std::unique_ptr<detail::ChildProcess> child_;
  std::string out_;
  std::string err_;
  int port_ = -1;
};

}  // namespace lockstep::test

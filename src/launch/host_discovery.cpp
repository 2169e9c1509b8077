// host_discovery.cpp — the discovery script of an elastic job (host_discovery.h).
#include "launch/host_discovery.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <utility>

#include "common/posix_io.h"
#include "launch/launch_summary.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

/// A script that takes longer than this is stopped and counted as failed.
constexpr std::chrono::seconds kScriptTimeout{10};

std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

}  // namespace

int slotsOfThisNode(const std::string& output, const std::vector<std::string>& thisNode,
                    std::vector<std::string>* otherHosts) {
  int slots = 0;
  std::istringstream in(output);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    line = trimmed(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t colon = line.rfind(':');
    const std::string host = line.substr(0, colon);
    int count = 1;
    if (colon != std::string::npos) {
      const std::string text = line.substr(colon + 1);
      const bool digits = !text.empty() && text.size() <= 6 && std::all_of(text.begin(), text.end(), ::isdigit);
      if (!digits || host.empty()) {
        throw Error(fmt::format("line {} is '{}', expected HOST:SLOTS or HOST", number, line));
      }
      count = std::stoi(text);
    }
    if (host.find_first_of(" \t") != std::string::npos) {
      throw Error(fmt::format("line {} is '{}', expected HOST:SLOTS or HOST", number, line));
    }
    if (std::find(thisNode.begin(), thisNode.end(), host) != thisNode.end()) {
      slots += count;
    } else if (otherHosts) {
      otherHosts->push_back(host);
    }
  }
  return slots;
}

HostDiscovery::HostDiscovery(std::string script, std::chrono::milliseconds interval,
                             std::map<std::string, std::string> env)
    : script_(std::move(script)), interval_(interval),
      env_(std::move(env)), thisNode_{"localhost", "127.0.0.1", hostName()},
      nextRun_(std::chrono::steady_clock::now()) {}

HostDiscovery::~HostDiscovery() = default;  // ~ChildProcess kills a script still running

std::optional<int> HostDiscovery::poll() {
  const auto now = std::chrono::steady_clock::now();
  if (!running_) {
    if (now < nextRun_) return std::nullopt;
    output_.clear();
    startedAt_ = now;
    nextRun_ = now + interval_;
    running_ = std::make_unique<ChildProcess>(std::vector<std::string>{"sh", "-c", script_}, env_);
  }
  // What it printed so far (its stderr goes nowhere: it is read only to keep the pipe drained).
  for (Fd* fd : {&running_->stdoutFd(), &running_->stderrFd()}) {
    pollfd p{fd->get(), POLLIN, 0};
    char buffer[4096];
    while (fd->valid() && ::poll(&p, 1, 0) > 0) {
      const ssize_t got = ::read(fd->get(), buffer, sizeof(buffer));
      if (got <= 0) {
        fd->reset();
        break;
      }
      if (fd == &running_->stdoutFd() && output_.size() < (1 << 20)) output_.append(buffer, static_cast<size_t>(got));
    }
  }
  running_->poll();
  if (!running_->running() && !running_->stdoutFd().valid()) return finish();  // ended, its output all read
  if (now - startedAt_ > kScriptTimeout) {
    running_.reset();
    sayOnce(fmt::format("did not end within {} s", kScriptTimeout.count()));
  }
  return std::nullopt;
}

/// The ended script's slots, or nullopt after saying why there are none.
std::optional<int> HostDiscovery::finish() {
  const std::unique_ptr<ChildProcess> script = std::move(running_);
  const int status = script->rawStatus();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    RankResult r;
    if (WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    sayOnce(describeRankEnd(r));
    return std::nullopt;
  }
  std::vector<std::string> others;
  try {
    const int slots = slotsOfThisNode(output_, thisNode_, &others);
    if (!others.empty()) {
      sayOnce(fmt::format("names host(s) {} that are not this node; an elastic job runs on one node: taking "
                          "this node's {} slot(s)",
                          fmt::join(others, ", "), slots),
              /*keeps=*/false);
    } else {
      lastSaid_.clear();
    }
    return slots;
  } catch (const Error& e) {
    sayOnce(fmt::format("printed garbage: {}", e.what()));
    return std::nullopt;
  }
}

void HostDiscovery::sayOnce(const std::string& what, bool keeps) {
  if (what == lastSaid_) return;
  lastSaid_ = what;
  writeAll(STDERR_FILENO, fmt::format("lockstep run: --host-discovery '{}' {}{}\n", script_, what,
                                      keeps ? "; the job goes on with the workers it has" : ""));
}

}  // namespace lockstep::detail

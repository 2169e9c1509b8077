// signal_pipe.cpp — the launcher's self-pipe and its signal handler.
#include "launch/signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/common/error.h"

namespace lockstep::detail {
namespace {

// ---- signals: a self-pipe, so the poll loop sees them ----------------------
int gSignalPipe[2] = {-1, -1};

extern "C" void onSignal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(gSignalPipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalGuard::SignalGuard() {
  if (::pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0) { throw Error(std::string("pipe: ") + std::strerror(errno)); }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : kSignals) ::sigaction(s, &sa, &old_[index(s)]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &oldPipe_);
}

SignalGuard::~SignalGuard() {
  for (int s : kSignals) ::sigaction(s, &old_[index(s)], nullptr);
  ::sigaction(SIGPIPE, &oldPipe_, nullptr);
  ::close(gSignalPipe[0]);
  ::close(gSignalPipe[1]);
  gSignalPipe[0] = gSignalPipe[1] = -1;
}

int SignalGuard::readFd() const { return gSignalPipe[0]; }

std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

}  // namespace lockstep::detail

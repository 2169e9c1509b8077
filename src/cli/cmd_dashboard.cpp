// cmd_dashboard.cpp — `lockstep dashboard`: serve the web page over a log directory.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "common/worker_thread.h"
#include "dashboard/server.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"

namespace lockstep::cli {

namespace {
constexpr const char* kDashboardUsage =
    "usage: lockstep dashboard --logdir DIR [--port 8080] [--host 127.0.0.1]\n"
    "DIR holds one subdirectory per run (monitor.dir=DIR/NAME in the training config)";

int gStopPipe = -1;  // write end; the signal handler only write(2)s to it

void onStopSignal(int /*sig*/) {
  int saved = errno;
  char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(gStopPipe, &byte, 1);
  errno = saved;
}
}  // namespace

int dashboardCommand(const std::vector<std::string>& args) {
  dashboard::ServerOptions o;
  CLI::App app{"Serve a web page of the training runs under a log directory", "lockstep dashboard"};
  app.add_option("--logdir", o.logdir, "directory holding one subdirectory per run")->required();
  app.add_option("--port", o.port, "TCP port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("--host", o.host,
                 "address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes every run "
                 "to the network, without authentication)");
  if (auto exit = parseArgs(app, args, "dashboard", kDashboardUsage)) return *exit;

  std::unique_ptr<dashboard::DashboardServer> server;
  try {
    server = std::make_unique<dashboard::DashboardServer>(o);
  } catch (const Error& e) {
    std::cerr << "lockstep dashboard: error: --logdir: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    server->bind();
  } catch (const Error& e) {
    std::cerr << "lockstep dashboard: " << e.what() << "\n";
    return kExitFailure;
  }
  // Ctrl-C and SIGTERM stop the server: the handler (on whichever thread gets
  // the signal; LibTorch may have started threads of its own) writes to a pipe
  // that a thread of ours waits on.
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
    std::cerr << "lockstep dashboard: pipe: " << std::strerror(errno) << "\n";
    return kExitFailure;
  }
  gStopPipe = pipeFds[1];
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  size_t runs = server->runCount();
  if (runs == 0) {
    log::warn(
        fmt::format("no runs in '{}' yet (a run is a subdirectory holding run.json, written by "
                    "training with monitor.dir={}/NAME); the page lists runs as they appear",
                    o.logdir, o.logdir));
  }
  if (o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1") {
    log::warn(
        fmt::format("listening on {}: anyone who can reach this port can read every run under '{}' "
                    "(metrics, configs, host names); there is no authentication",
                    o.host, o.logdir));
  }
  std::cout << fmt::format("lockstep dashboard: serving {} run{} from {} at {}  (Ctrl-C stops)\n", runs,
                           runs == 1 ? "" : "s", o.logdir, server->url())
            << std::flush;

  std::thread waiter = detail::startThread([&] {
    char byte = 0;
    while (::read(pipeFds[0], &byte, 1) < 0 && errno == EINTR) {}
    server->stop();
  });
  server->serve();
  // serve() also returns when listening failed: wake the waiter if no signal did.
  onStopSignal(0);
  waiter.join();
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
  return kExitOk;
}

}  // namespace lockstep::cli

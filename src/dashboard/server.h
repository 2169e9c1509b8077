// server.h — the HTTP server of `lockstep dashboard`.
//
// Serves the embedded page and a read-only JSON API over one log directory
// (docs/dashboard.md):
//   GET /, /charts.js, /app.js, /style.css   the page
//   GET /api/runs                       {"logdir", "runs": [{"name", "run": run.json} | {"name", "error"}]}
//   GET /api/runs/<name>                RunReader::toJson() of that run
//   GET /api/runs/<name>/timeline/<R>   timeline/rank<R>.trace.json, as a download
// Errors are JSON {"error": "...", "file"?, "line"?}: 400 for a run name that is
// not a plain directory name (path traversal), 404 for no such run, 500 for a
// malformed file (the message names the file and line).
//
// Threads: the server answers on its own thread pool; requests share one
// LogDir behind a mutex. stop() may be called from any thread.
#pragma once

#include <memory>
#include <string>

namespace lockstep::dashboard {

struct ServerOptions {
  std::string logdir;
  std::string host = "127.0.0.1";  ///< loopback only unless the user asks
  int port = 8080;                 ///< 0: a free port, chosen by the kernel
};

class DashboardServer {
 public:
  /// Opens the log directory; throws Error when it does not exist or is not a directory.
  explicit DashboardServer(ServerOptions options);
  ~DashboardServer();
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  /// Binds host:port; returns the port (the chosen one for port 0). Throws Error
  /// naming the address when it cannot be bound (in use, bad host).
  int bind();
  /// Answers requests until stop(); call after bind().
  void serve();
  /// Makes serve() return; safe from any thread, also before serve() started.
  void stop();

  /// "http://host:port/" once bound.
  std::string url() const;
  /// Names of the runs now in the log directory.
  size_t runCount() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::dashboard

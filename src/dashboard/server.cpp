#include "dashboard/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/posix_io.h"
#include "dashboard/assets.h"
#include "dashboard/run_reader.h"
#include "dashboard/sweep_reader.h"
#include "lockstep/common/logging.h"

namespace lockstep::dashboard {

namespace {

std::string dumpJson(const nlohmann::json& value) {
  // Config text and run names come from files: replace invalid UTF-8 instead of throwing.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void sendJson(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(dumpJson(body), "application/json");
}

void sendError(httplib::Response& res, int status, const std::string& message) {
  sendJson(res, status, {{"error", message}});
}

void sendAsset(httplib::Response& res, std::string_view name) {
  const Asset* asset = findAsset(name);
  LOCKSTEP_ASSERT(asset != nullptr, "asset ", name, " is not embedded");
  res.set_content(asset->body.data(), asset->body.size(), std::string(asset->contentType));
}

std::vector<std::string> splitPath(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t slash = text.find('/', start);
    parts.push_back(text.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

/// The host part of a Host header ("name:port", "[v6]:port", "name").
std::string hostOf(const std::string& header) {
  if (!header.empty() && header.front() == '[') return header.substr(0, header.find(']') + 1);
  return header.substr(0, header.find(':'));
}

bool isIpLiteral(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return true;
  return host.size() > 2 && host.front() == '[' &&
         ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) == 1;
}

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

/// Whether a request naming `host` may be served: DNS rebinding gives an
/// attacker's page a name of its own that resolves to this server, so only
/// names this machine answers to are accepted — localhost, IP literals (the
/// bound address among them) and this machine's host name `self` (lowercase)
/// and names under it.
bool allowedHost(const std::string& host, const std::string& bound, const std::string& self) {
  const std::string h = lowercase(host);
  if (h == "localhost" || h == bound || isIpLiteral(h)) return true;
  return !self.empty() && (h == self || h.rfind(self + ".", 0) == 0);
}

}  // namespace

struct DashboardServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), selfName(lowercase(detail::hostName())), logdir(options.logdir) {}

  void routes();
  void runRequest(const httplib::Request& req, httplib::Response& res);
  void sendTimeline(httplib::Response& res, const std::string& name, const std::string& rankText);

  ServerOptions options;
  std::string selfName;  ///< this machine's host name, lowercase (the Host check)
  std::mutex mutex;      // guards logdir
  LogDir logdir;
  httplib::Server server;
  int port = -1;
  std::atomic<bool> serving{false};
  std::atomic<bool> stopping{false};
};

void DashboardServer::Impl::routes() {
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string host = hostOf(req.get_header_value("Host"));
    if (host.empty() || allowedHost(host, options.host, selfName)) return httplib::Server::HandlerResponse::Unhandled;
    log::warn(fmt::format("dashboard: refused {} {} for Host '{}' (not this machine's name: DNS rebinding?)",
                          req.method, req.path, host));
    sendError(res, 403,
              fmt::format("Host '{}' is not a name of this dashboard: open it as localhost, by IP address or by "
                          "this machine's host name",
                          host));
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) { sendAsset(res, "index.html"); });
  server.Get(R"(/(index\.html|charts\.js|sweep\.js|app\.js|style\.css))",
             [](const httplib::Request& req, httplib::Response& res) { sendAsset(res, req.matches[1].str()); });
  server.Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex);
    sendJson(res, 200, logdir.listRuns());
  });
  server.Get("/api/sweep", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      if (auto sweep = readSweep(logdir.path())) {
        sendJson(res, 200, *sweep);
      } else {
        sendError(res, 404, fmt::format("{} holds no sweep (no trials.jsonl)", logdir.path()));
      }
    } catch (const RunFormatError& e) { sendJson(res, 500, {{"error", e.what()}, {"file", e.file()}}); }
  });
  // The path arrives URL-decoded: "/api/runs/..%2f.." is "/api/runs/../.." here.
  server.Get(R"(/api/runs/(.*))",
             [this](const httplib::Request& req, httplib::Response& res) { runRequest(req, res); });
  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) { what = e.what(); } catch (...) {
    }
    log::error(fmt::format("dashboard: {} {}: {}", req.method, req.path, what));
    sendError(res, 500, what);
  });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) sendError(res, res.status, fmt::format("{} {}: not found", req.method, req.path));
  });
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    log::debug(fmt::format("dashboard: {} {} -> {}", req.method, req.path, res.status));
  });
  // httplib's default sets SO_REUSEPORT, which lets a second dashboard bind the
  // same port and silently take half of the requests: only SO_REUSEADDR (restart
  // right after a stop), so a port in use is an error.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Short keep-alive so stop() does not wait long for an idle browser connection.
  server.set_keep_alive_timeout(2);
}

void DashboardServer::Impl::runRequest(const httplib::Request& req, httplib::Response& res) {
  std::vector<std::string> parts = splitPath(req.matches[1].str());
  const std::string& name = parts[0];
  if (!isValidRunName(name)) {
    sendError(res, 400,
              fmt::format("invalid run name '{}': a run is a direct subdirectory of the log directory", name));
    return;
  }
  if (parts.size() == 3 && parts[1] == "timeline") {
    sendTimeline(res, name, parts[2]);
    return;
  }
  if (parts.size() != 1) {
    sendError(res, 404, fmt::format("{}: not found", req.path));
    return;
  }
  std::lock_guard<std::mutex> lock(mutex);
  try {
    sendJson(res, 200, logdir.run(name).toJson());
  } catch (const RunNotFound& e) { sendError(res, 404, e.what()); } catch (const RunFormatError& e) {
    nlohmann::json body{{"error", e.what()}, {"file", e.file()}};
    if (e.line() > 0) body["line"] = e.line();
    sendJson(res, 500, body);
  }
}

void DashboardServer::Impl::sendTimeline(httplib::Response& res, const std::string& name, const std::string& rankText) {
  bool digits =
      !rankText.empty() && rankText.size() <= 6 && rankText.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) {
    sendError(res, 400, fmt::format("invalid rank '{}': expected a number", rankText));
    return;
  }
  std::string path = fmt::format("{}/{}/timeline/rank{}.trace.json", options.logdir, name, std::stoi(rankText));
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    sendError(res, 404, fmt::format("run '{}' has no timeline for rank {}", name, rankText));
    return;
  }
  auto file = std::make_shared<std::ifstream>(path, std::ios::binary);
  res.set_header("Content-Disposition",
                 fmt::format("attachment; filename=\"{}-rank{}.trace.json\"", name, std::stoi(rankText)));
  res.set_content_provider(static_cast<size_t>(size), "application/json",
                           [file](size_t offset, size_t length, httplib::DataSink& sink) {
                             char buffer[65536];
                             file->seekg(static_cast<std::streamoff>(offset));
                             file->read(buffer, static_cast<std::streamsize>(std::min(length, sizeof(buffer))));
                             std::streamsize got = file->gcount();
                             if (got <= 0) return false;  // the file shrank under us
                             sink.write(buffer, static_cast<size_t>(got));
                             return true;
                           });
}

DashboardServer::DashboardServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->routes();
}

DashboardServer::~DashboardServer() { stop(); }

int DashboardServer::bind() {
  const auto& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw ConfigError(fmt::format("--port {}: expected 0..65535", o.port));
  if (o.port == 0) {
    impl_->port = impl_->server.bind_to_any_port(o.host);
  } else {
    impl_->port = impl_->server.bind_to_port(o.host, o.port) ? o.port : -1;
  }
  if (impl_->port < 0) {
    throw Error(
        fmt::format("cannot listen on {}:{} (address in use or not local?); "
                    "--port 0 picks a free port",
                    o.host, o.port));
  }
  return impl_->port;
}

void DashboardServer::serve() {
  LOCKSTEP_CHECK(impl_->port >= 0, "DashboardServer::serve() called before bind()");
  impl_->serving = true;
  if (!impl_->stopping) impl_->server.listen_after_bind();
  impl_->serving = false;
}

void DashboardServer::stop() {
  impl_->stopping = true;
  // serve() may be between its check of `stopping` and httplib marking itself running.
  while (impl_->serving && !impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
}

std::string DashboardServer::url() const {
  std::string host = impl_->options.host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {};
    host = ::gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return fmt::format("http://{}:{}/", host, impl_->port);
}

size_t DashboardServer::runCount() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->logdir.runNames().size();
}

}  // namespace lockstep::dashboard

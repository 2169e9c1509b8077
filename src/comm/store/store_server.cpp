// The rendezvous store's server, its connections: one thread, poll(), the
// token handshake and the limits that keep anyone who can connect from
// starving it (store_server.h; the requests are in store_requests.cpp).
#include "comm/store/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/socket_address.h"
#include "common/worker_thread.h"
#include "lockstep/common/comm_error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/token.h"

namespace lockstep::detail {

using namespace store_wire;

namespace {
constexpr int kRefusalsLoggedOneByOne = 10;
constexpr auto kRefusalSummaryEvery = std::chrono::seconds(5);
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);  // after EMFILE with nothing to drop
constexpr int kAcceptsPerWake = 64;
}  // namespace

StoreServer::StoreServer(int listenFd, int port, std::string token, StoreLimits limits)
    : listen_(listenFd), port_(port), token_(std::move(token)), limits_(limits) {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_);
    fail(CommErrorKind::kBackend, "serve rendezvous store", std::string("pipe: ") + std::strerror(errno));
  }
  thread_ = detail::startThread([this] { loop(); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  char c = 1;
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  for (auto& [fd, conn] : conns_) ::close(fd);
  ::close(listen_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

StoreServerStats StoreServer::stats() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  StoreServerStats s = stats_;
  s.refused = refused_.load();
  return s;
}

void StoreServer::loop() {
  while (!stop_) {
    auto fds = pollSet(Clock::now());
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(nextDeadlineMs(Clock::now())));
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) acceptAll(Clock::now());
    for (size_t i = 2; i < fds.size(); ++i) {
      int fd = fds[i].fd;
      if (conns_.count(fd) && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) readFrom(fd);
      if (conns_.count(fd) && (fds[i].revents & POLLOUT)) writeTo(fd);
    }
    auto now = Clock::now();
    expireWaiters(now);
    expireHandshakes(now);
    summariseRefusals(now, false);
    publishStats();
  }
}

std::vector<pollfd> StoreServer::pollSet(Clock::time_point now) const {
  short listenEvents = now < acceptPausedUntil_ ? 0 : POLLIN;
  std::vector<pollfd> fds{{listen_, listenEvents, 0}, {wake_[0], POLLIN, 0}};
  for (const auto& [fd, conn] : conns_) {
    // A client that does not read its replies is not read either, so its queue stays bounded.
    bool reading = !conn.closing && conn.out.size() <= limits_.maxQueuedReplyBytes;
    short events = reading ? POLLIN : 0;
    if (!conn.out.empty()) events |= POLLOUT;
    fds.push_back({fd, events, 0});
  }
  return fds;
}

int64_t StoreServer::nextDeadlineMs(Clock::time_point now) const {
  auto next = now + std::chrono::seconds(1);
  if (acceptPausedUntil_ > now) next = std::min(next, acceptPausedUntil_);
  for (const auto& w : waiters_) {
    if (w.deadline) next = std::min(next, *w.deadline);
  }
  for (const auto& [fd, conn] : conns_) {
    if (!conn.authed) next = std::min(next, conn.handshakeDeadline);
  }
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
}

void StoreServer::acceptAll(Clock::time_point now) {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: free one held by a connection still to prove the token, else wait a little
        // (the listening socket stays readable, so polling it now would spin).
        if (dropOldestPending("the server is out of file descriptors; try again")) continue;
        acceptPausedUntil_ = now + kAcceptBackoff;
        noteRefusal("a client in the listen queue",
                    fmt::format("out of file descriptors ({}); not accepting for 100 ms", std::strerror(errno)));
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (pending_ >= limits_.maxPendingConnections) {
      dropOldestPending(fmt::format("busy: {} connections are proving the job token at once (the limit); try again",
                                    limits_.maxPendingConnections));
    }
    Conn conn;
    conn.peer = fmt::format("{}:{}", hostOf(addr), portOf(addr));
    conn.nonce = toString(randomBytes(kNonceSize));
    conn.handshakeDeadline = now + limits_.handshakeTimeout;
    conn.out.assign(kMagic, sizeof(kMagic));
    conn.out += conn.nonce;
    conns_.emplace(fd, std::move(conn));
    ++pending_;
  }
}

/// Drops the connection that has waited longest without proving the token; false when there is none.
bool StoreServer::dropOldestPending(const std::string& why) {
  int oldest = -1;
  for (const auto& [fd, conn] : conns_) {
    if (conn.authed || conn.closing) continue;
    if (oldest < 0 || conn.handshakeDeadline < conns_.at(oldest).handshakeDeadline) oldest = fd;
  }
  if (oldest < 0) return false;
  refuse(oldest, why, kBusy);
  auto it = conns_.find(oldest);
  if (it != conns_.end()) close(oldest);  // its descriptor is what the caller needs
  return true;
}

void StoreServer::close(int fd) {
  auto it = conns_.find(fd);
  if (it != conns_.end() && !it->second.authed && !it->second.closing) --pending_;
  ::close(fd);
  conns_.erase(fd);
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.fd == fd; }),
                 waiters_.end());
}

void StoreServer::refuse(int fd, const std::string& why, Status status) {
  Conn& conn = conns_.at(fd);
  if (!conn.authed && !conn.closing) --pending_;
  noteRefusal(conn.peer, why);
  conn.out.push_back(static_cast<char>(status));
  putBytes(conn.out, why);
  conn.closing = true;
  conn.in.clear();
  writeTo(fd);
}

void StoreServer::noteRefusal(const std::string& peer, const std::string& why) {
  int n = ++refused_;
  if (n <= kRefusalsLoggedOneByOne) {
    log::warn(fmt::format("rendezvous store: refused a connection from {}: {}{}", peer, why,
                          n == kRefusalsLoggedOneByOne ? " (further refusals are summarised every 5 s)" : ""));
    lastSummary_ = Clock::now();
    return;
  }
  ++suppressed_;
  lastRefusal_ = fmt::format("the latest from {}: {}", peer, why);
}

void StoreServer::summariseRefusals(Clock::time_point now, bool force) {
  if (suppressed_ == 0 || (!force && now - lastSummary_ < kRefusalSummaryEvery)) return;
  log::warn(fmt::format("rendezvous store: refused {} more connection(s) ({}); {} in all", suppressed_, lastRefusal_,
                        refused_.load()));
  suppressed_ = 0;
  lastSummary_ = now;
}

void StoreServer::readFrom(int fd) {
  char buffer[65536];
  for (;;) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& conn = it->second;
    // Before the proof, read no more than the proof: nothing else is buffered for a stranger.
    size_t room = conn.authed || conn.closing ? sizeof(buffer) : kProofSize - conn.in.size();
    if (conn.authed && conn.out.size() > limits_.maxQueuedReplyBytes) break;
    ssize_t n = ::recv(fd, buffer, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      close(fd);  // end of stream or error
      return;
    }
    if (conn.closing) continue;  // discarded; it is closed once its refusal is sent
    conn.in.append(buffer, static_cast<size_t>(n));
    if (!conn.authed) {
      if (conn.in.size() == kProofSize && !checkProof(fd)) return;
      continue;
    }
    if (!processFrames(fd)) return;
  }
  writeTo(fd);
}

/// The client's proof is complete in `in`: admit it, or refuse it (false).
bool StoreServer::checkProof(int fd) {
  Conn& conn = conns_.at(fd);
  if (std::memcmp(conn.in.data(), kMagic, sizeof(kMagic)) != 0) {
    refuse(fd, "it does not speak lockstep's store protocol");
    return false;
  }
  std::string clientNonce = conn.in.substr(sizeof(kMagic), kNonceSize);
  auto mac = toBytes(conn.in.substr(sizeof(kMagic) + kNonceSize, kMacSize));
  if (!constantTimeEqual(mac, hmacSha256(token_, macInput("client", conn.nonce, clientNonce)))) {
    refuse(fd, "wrong job token");
    return false;
  }
  size_t clients = 0;
  for (const auto& [other, c] : conns_) clients += c.authed && !c.closing ? 1 : 0;
  if (clients >= limits_.maxClients) {
    refuse(fd, fmt::format("the store already serves {} clients (the limit)", limits_.maxClients));
    return false;
  }
  conn.authed = true;
  --pending_;
  conn.in.clear();
  conn.out.push_back(static_cast<char>(kOk));
  conn.out += toString(hmacSha256(token_, macInput("server", conn.nonce, clientNonce)));
  return true;
}

void StoreServer::writeTo(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& conn = it->second;
  while (!conn.out.empty()) {
    ssize_t n = ::send(fd, conn.out.data(), conn.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      conn.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    close(fd);
    return;
  }
  if (conn.closing) close(fd);
}

void StoreServer::expireHandshakes(Clock::time_point now) {
  std::vector<int> stale;
  for (auto& [fd, conn] : conns_) {
    if (!conn.authed && !conn.closing && conn.handshakeDeadline <= now) stale.push_back(fd);
  }
  for (int fd : stale) {
    refuse(fd, fmt::format("it did not prove the job token within {} ms", limits_.handshakeTimeout.count()));
  }
}

void StoreServer::publishStats() {
  size_t clients = 0, buffered = 0;
  for (const auto& [fd, conn] : conns_) {
    clients += conn.authed ? 1 : 0;
    buffered += conn.in.size() + conn.out.size();
  }
  std::lock_guard<std::mutex> lock(statsMutex_);
  stats_.pending = pending_;
  stats_.clients = clients;
  stats_.storedBytes = storedBytes_;
  stats_.bufferedBytes = buffered;
  stats_.peakPending = std::max(stats_.peakPending, pending_);
  stats_.peakConnections = std::max(stats_.peakConnections, conns_.size());
  stats_.peakBufferedBytes = std::max(stats_.peakBufferedBytes, buffered);
}

std::shared_ptr<StoreServer> startStoreServer(const std::string& host, int port, const std::string& token,
                                              const StoreLimits& limits) {
  addrinfo* addresses = resolve(host, port, true);
  std::string lastError = "no address";
  for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
      lastError = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    freeaddrinfo(addresses);
    return std::make_shared<StoreServer>(fd, portOf(bound), token, limits);
  }
  freeaddrinfo(addresses);
  fail(CommErrorKind::kBackend, "serve rendezvous store",
       fmt::format("cannot listen at tcp://{}:{}: {} (is the port in use, or the address not one of this host's?)",
                   host, port, lastError));
}

int serverPort(const StoreServer& server) { return server.port(); }
int refusedConnections(const StoreServer& server) { return server.refused(); }
StoreServerStats serverStats(const StoreServer& server) { return server.stats(); }

}  // namespace lockstep::detail

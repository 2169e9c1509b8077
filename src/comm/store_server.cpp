// The rendezvous store's server: one thread, poll(), the token handshake, and
// the requests of admitted clients (tcp_store.h describes the protocol).
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "comm/store_wire.h"
#include "common/posix_io.h"
#include "common/socket_address.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/token.h"

namespace lockstep::detail {

using namespace store_wire;

// ---- server ------------------------------------------------------------------

class StoreServer {
 public:
  StoreServer(int listenFd, int port, std::string token) : listen_(listenFd), port_(port), token_(std::move(token)) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_);
      fail(CommErrorKind::kBackend, "serve rendezvous store", std::string("pipe: ") + std::strerror(errno));
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~StoreServer() {
    stop_ = true;
    char c = 1;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, conn] : conns_) ::close(fd);
    ::close(listen_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  int port() const { return port_; }
  int refused() const { return refused_.load(); }

 private:
  struct Conn {
    std::string peer;
    std::string in, out;
    std::string nonce;
    bool authed = false;
    bool closing = false;  // close once `out` is flushed
    Clock::time_point handshakeDeadline;
  };
  struct Waiter {
    int fd;
    std::vector<std::string> keys;
    bool wantValue;  // a get: reply with the value of keys[0]
    std::optional<Clock::time_point> deadline;
  };

  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (auto& [fd, conn] : conns_) {
        short events = conn.closing ? 0 : POLLIN;
        if (!conn.out.empty()) events |= POLLOUT;
        fds.push_back({fd, events, 0});
      }
      int timeoutMs = static_cast<int>(nextDeadlineMs());
      int n = ::poll(fds.data(), fds.size(), timeoutMs);
      if (n < 0 && errno != EINTR) break;
      if (fds[0].revents & POLLIN) accept();
      for (size_t i = 2; i < fds.size(); ++i) {
        int fd = fds[i].fd;
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) readFrom(fd);
        it = conns_.find(fd);
        if (it != conns_.end() && (fds[i].revents & POLLOUT)) writeTo(fd);
      }
      expire();
    }
  }

  int64_t nextDeadlineMs() const {
    auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (const auto& w : waiters_) {
      if (w.deadline) next = std::min(next, *w.deadline);
    }
    for (const auto& [fd, conn] : conns_) {
      if (!conn.authed) next = std::min(next, conn.handshakeDeadline);
    }
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
  }

  void accept() {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn conn;
    conn.peer = fmt::format("{}:{}", hostOf(addr), portOf(addr));
    conn.nonce = toString(randomBytes(kNonceSize));
    conn.handshakeDeadline = Clock::now() + kHandshakeTimeout;
    conn.out.assign(kMagic, sizeof(kMagic));
    conn.out += conn.nonce;
    conns_.emplace(fd, std::move(conn));
  }

  void close(int fd) {
    ::close(fd);
    conns_.erase(fd);
    waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.fd == fd; }),
                   waiters_.end());
  }

  void refuse(int fd, Conn& conn, const std::string& why) {
    ++refused_;
    log::warn(fmt::format("rendezvous store: refused a connection from {}: {}", conn.peer, why));
    conn.out.push_back(static_cast<char>(kFailed));
    putBytes(conn.out, why);
    conn.closing = true;
    conn.in.clear();
    writeTo(fd);
  }

  void readFrom(int fd) {
    Conn& conn = conns_.at(fd);
    char buffer[65536];
    while (true) {
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        if (!conn.closing) conn.in.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      close(fd);  // end of stream or error
      return;
    }
    if (conn.closing) return;
    if (!conn.authed) {
      if (conn.in.size() < kProofSize) return;
      std::string clientNonce = conn.in.substr(sizeof(kMagic), kNonceSize);
      auto mac = toBytes(conn.in.substr(sizeof(kMagic) + kNonceSize, kMacSize));
      if (std::memcmp(conn.in.data(), kMagic, sizeof(kMagic)) != 0) {
        refuse(fd, conn, "it does not speak lockstep's store protocol");
        return;
      }
      if (!constantTimeEqual(mac, hmacSha256(token_, macInput("client", conn.nonce, clientNonce)))) {
        refuse(fd, conn, "wrong job token");
        return;
      }
      conn.authed = true;
      conn.in.erase(0, kProofSize);
      conn.out.push_back(static_cast<char>(kOk));
      conn.out += toString(hmacSha256(token_, macInput("server", conn.nonce, clientNonce)));
    }
    // Handling a request can flush (and on error close) this or another connection: look it up each time.
    for (auto it = conns_.find(fd); it != conns_.end() && it->second.in.size() >= 5; it = conns_.find(fd)) {
      Conn& conn = it->second;
      Reader header{conn.in};
      uint8_t op = static_cast<uint8_t>(header.integer(1));
      uint32_t length = static_cast<uint32_t>(header.integer(4));
      if (length > kMaxFrame) {
        refuse(fd, conn, fmt::format("a request of {} bytes exceeds the limit of {}", length, kMaxFrame));
        return;
      }
      if (conn.in.size() < 5 + static_cast<size_t>(length)) break;
      std::string payload = conn.in.substr(5, length);
      conn.in.erase(0, 5 + static_cast<size_t>(length));
      try {
        handle(fd, op, payload);
      } catch (const std::exception& e) {
        refuse(fd, conn, fmt::format("malformed request (op {}): {}", op, e.what()));
        return;
      }
    }
    writeTo(fd);
  }

  void writeTo(int fd) {
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

  void reply(int fd, Status status, const std::string& payload) {
    Conn& conn = conns_.at(fd);
    conn.out.push_back(static_cast<char>(status));
    putBytes(conn.out, payload);
  }

  bool present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
  }

  void handle(int fd, uint8_t op, const std::string& payload) {
    Reader r{payload};
    switch (op) {
      case kSet: {
        std::string key = r.bytes();
        data_[key] = r.bytes();
        reply(fd, kOk, "");
        wakeWaiters();
        return;
      }
      case kGet:
      case kWait: {
        uint64_t timeoutMs = r.integer(8);
        std::vector<std::string> keys;
        if (op == kGet) {
          keys.push_back(r.bytes());
        } else {
          uint64_t n = r.integer(4);
          for (uint64_t i = 0; i < n; ++i) keys.push_back(r.bytes());
        }
        Waiter w{fd, std::move(keys), op == kGet, std::nullopt};
        if (timeoutMs > 0) w.deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
        if (present(w.keys)) {
          reply(fd, kOk, w.wantValue ? data_[w.keys[0]] : "");
        } else {
          waiters_.push_back(std::move(w));
        }
        return;
      }
      case kAdd: {
        std::string key = r.bytes();
        int64_t delta = static_cast<int64_t>(r.integer(8));
        int64_t value = delta;
        auto it = data_.find(key);
        if (it != data_.end()) value += std::stoll(it->second.empty() ? "0" : it->second);
        data_[key] = std::to_string(value);
        std::string out;
        putU64(out, static_cast<uint64_t>(value));
        reply(fd, kOk, out);
        wakeWaiters();
        return;
      }
      case kCheck: {
        uint64_t n = r.integer(4);
        std::vector<std::string> keys;
        for (uint64_t i = 0; i < n; ++i) keys.push_back(r.bytes());
        reply(fd, kOk, std::string(1, present(keys) ? 1 : 0));
        return;
      }
      case kDelete: {
        bool erased = data_.erase(r.bytes()) != 0;
        reply(fd, kOk, std::string(1, erased ? 1 : 0));
        return;
      }
      case kNumKeys: {
        std::string out;
        putU64(out, data_.size());
        reply(fd, kOk, out);
        return;
      }
      case kCompareSet: {
        std::string key = r.bytes();
        std::string expected = r.bytes();
        std::string desired = r.bytes();
        auto it = data_.find(key);
        if ((it == data_.end() && expected.empty()) || (it != data_.end() && it->second == expected)) {
          data_[key] = desired;
          reply(fd, kOk, desired);
          wakeWaiters();
        } else {
          reply(fd, kOk, it == data_.end() ? expected : it->second);
        }
        return;
      }
      default: throw std::runtime_error(fmt::format("unknown operation {}", op));
    }
  }

  void wakeWaiters() {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (present(it->keys)) {
        reply(it->fd, kOk, it->wantValue ? data_[it->keys[0]] : "");
        int fd = it->fd;
        it = waiters_.erase(it);
        writeTo(fd);
      } else {
        ++it;
      }
    }
  }

  void expire() {
    auto now = Clock::now();
    std::vector<int> toFlush;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline && *it->deadline <= now) {
        reply(it->fd, kTimedOut, "");
        toFlush.push_back(it->fd);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    for (int fd : toFlush) writeTo(fd);
    std::vector<int> stale;
    for (auto& [fd, conn] : conns_) {
      if (!conn.authed && !conn.closing && conn.handshakeDeadline <= now) stale.push_back(fd);
    }
    for (int fd : stale) refuse(fd, conns_.at(fd), "it did not prove the job token in time");
  }

  int listen_;
  int port_;
  std::string token_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::map<int, Conn> conns_;
  std::vector<Waiter> waiters_;
  std::map<std::string, std::string> data_;
  std::thread thread_;
};

std::shared_ptr<StoreServer> startStoreServer(const std::string& host, int port, const std::string& token) {
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
    return std::make_shared<StoreServer>(fd, portOf(bound), token);
  }
  freeaddrinfo(addresses);
  fail(CommErrorKind::kBackend, "serve rendezvous store",
       fmt::format("cannot listen at tcp://{}:{}: {} (is the port in use, or the address not one of this host's?)",
                   host, port, lastError));
}

int serverPort(const StoreServer& server) { return server.port(); }
int refusedConnections(const StoreServer& server) { return server.refused(); }

}  // namespace lockstep::detail

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

#include "lockstep/comm/comm_error.h"
#include "lockstep/common/logging.h"
#include "common/socket_address.h"
#include "lockstep/common/token.h"

namespace lockstep::detail {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'L', 'K', 'S', 'T', 'O', 'R', 'E', '1'};
constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;
constexpr size_t kGreetingSize = sizeof(kMagic) + kNonceSize;               // server -> client
constexpr size_t kProofSize = sizeof(kMagic) + kNonceSize + kMacSize;       // client -> server
constexpr uint32_t kMaxFrame = 256u << 20;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys, kCompareSet, kWait };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2 };

void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void putBytes(std::string& out, const std::string& s) {
  putU32(out, static_cast<uint32_t>(s.size()));
  out += s;
}

/// Reads the fields of one frame; any overrun throws, so a malformed frame never reads past its end.
struct Reader {
  const std::string& data;
  size_t pos = 0;
  uint64_t integer(int bytes) {
    if (data.size() - pos < static_cast<size_t>(bytes)) throw std::runtime_error("frame too short");
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data[pos + i])) << (8 * i);
    pos += bytes;
    return v;
  }
  std::string bytes() {
    uint64_t n = integer(4);
    if (data.size() - pos < n) throw std::runtime_error("field longer than its frame");
    std::string s = data.substr(pos, n);
    pos += n;
    return s;
  }
};

std::vector<uint8_t> macInput(const char* side, const std::string& serverNonce, const std::string& clientNonce) {
  std::vector<uint8_t> in(side, side + std::strlen(side));
  in.insert(in.end(), serverNonce.begin(), serverNonce.end());
  in.insert(in.end(), clientNonce.begin(), clientNonce.end());
  return in;
}

std::string toString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> toBytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }


[[noreturn]] void fail(CommErrorKind kind, const std::string& op, const std::string& detail, int64_t timeoutMs = -1) {
  CommErrorInfo info;
  info.kind = kind;
  info.op = op;
  info.detail = detail;
  info.timeoutMs = timeoutMs;
  throw CommError(info);
}

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0) {
    fail(CommErrorKind::kBackend, passive ? "serve rendezvous store" : "connect to rendezvous store",
         fmt::format("cannot resolve master address '{}': {}", host, gai_strerror(rc)));
  }
  return result;
}

}  // namespace

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
      default:
        throw std::runtime_error(fmt::format("unknown operation {}", op));
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

// ---- client ------------------------------------------------------------------

namespace {

/// Waits until `fd` is readable/writable or `deadline` passes; false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the following call report the error
  }
}

/// Reads exactly `n` bytes; an empty optional on timeout, throws on a closed connection.
std::optional<std::string> readExactly(int fd, size_t n, Clock::time_point deadline, const std::string& where) {
  std::string out;
  out.reserve(n);
  char buffer[65536];
  while (out.size() < n) {
    if (!waitFor(fd, POLLIN, deadline)) return std::nullopt;
    ssize_t got = ::recv(fd, buffer, std::min(sizeof(buffer), n - out.size()), 0);
    if (got > 0) {
      out.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      fail(CommErrorKind::kPeerFailure, "rendezvous store",
           fmt::format("the connection to the rendezvous store at {} was closed (the master process, rank 0, "
                       "may have exited)", where));
    }
  }
  return out;
}

void writeAll(int fd, const std::string& data, const std::string& where) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fail(CommErrorKind::kPeerFailure, "rendezvous store",
           fmt::format("cannot send to the rendezvous store at {}: {}", where, std::strerror(errno)));
    }
  }
}

/// One connect attempt with a bounded wait; -1 when it did not connect.
int tryConnect(const addrinfo* a, Clock::time_point deadline, std::string& error) {
  int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    auto attemptDeadline = std::min(deadline, Clock::now() + std::chrono::seconds(3));
    if (waitFor(fd, POLLOUT, attemptDeadline)) {
      int soError = 0;
      socklen_t len = sizeof(soError);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len);
      rc = soError == 0 ? 0 : -1;
      errno = soError;
    } else {
      errno = ETIMEDOUT;
    }
  }
  if (rc != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval sendLimit{30, 0};  // a send into a dead link fails instead of blocking for good
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendLimit, sizeof(sendLimit));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int port, std::string token, std::chrono::milliseconds timeout)
    : c10d::Store(timeout), host_(std::move(host)), port_(port) {
  auto deadline = Clock::now() + timeout;
  std::string where = address();
  std::string lastError = "nothing answered";
  while (fd_ < 0) {
    addrinfo* addresses = resolve(host_, port_, false);
    for (addrinfo* a = addresses; a != nullptr && fd_ < 0; a = a->ai_next) fd_ = tryConnect(a, deadline, lastError);
    freeaddrinfo(addresses);
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline) {
      fail(CommErrorKind::kTimeout, "connect to rendezvous store",
           fmt::format("timed out: cannot reach the master at {} ({}); is rank 0 running and the address one this "
                       "host can reach?", where, lastError),
           timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Handshake: prove the token, check the server's proof.
  auto handshakeDeadline = std::min(deadline, Clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                kHandshakeTimeout));
  auto greeting = readExactly(fd_, kGreetingSize, handshakeDeadline, where);
  if (!greeting || std::memcmp(greeting->data(), kMagic, sizeof(kMagic)) != 0) {
    ::close(fd_);
    fd_ = -1;
    fail(CommErrorKind::kBackend, "connect to rendezvous store",
         fmt::format("the process listening at {} is not a lockstep rendezvous store (no greeting)", where));
  }
  std::string serverNonce = greeting->substr(sizeof(kMagic));
  std::string clientNonce = toString(randomBytes(kNonceSize));
  std::string proof(kMagic, sizeof(kMagic));
  proof += clientNonce;
  proof += toString(hmacSha256(token, macInput("client", serverNonce, clientNonce)));
  writeAll(fd_, proof, where);
  auto status = readExactly(fd_, 1, handshakeDeadline, where);
  if (status && static_cast<uint8_t>((*status)[0]) == kOk) {
    auto mac = readExactly(fd_, kMacSize, handshakeDeadline, where);
    if (mac && constantTimeEqual(toBytes(*mac), hmacSha256(token, macInput("server", serverNonce, clientNonce)))) {
      return;
    }
    ::close(fd_);
    fd_ = -1;
    fail(CommErrorKind::kBackend, "connect to rendezvous store",
         fmt::format("the rendezvous store at {} could not prove it knows the job token; refusing to join it", where));
  }
  std::string reason = "no answer";
  if (status) {
    auto length = readExactly(fd_, 4, handshakeDeadline, where);
    if (length) {
      Reader r{*length};
      uint64_t n = std::min<uint64_t>(r.integer(4), 4096);
      reason = readExactly(fd_, n, handshakeDeadline, where).value_or("?");
    }
  }
  ::close(fd_);
  fd_ = -1;
  fail(CommErrorKind::kBackend, "connect to rendezvous store",
       fmt::format("the rendezvous store at {} refused this process: {}. Every process of a job must hold the same "
                   "job token (`lockstep run` hands its workers one; otherwise set {} or {})",
                   where, reason, kJobTokenVar, kJobTokenFileVar));
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::address() const {
  bool v6 = host_.find(':') != std::string::npos;
  return v6 ? fmt::format("tcp://[{}]:{}", host_, port_) : fmt::format("tcp://{}:{}", host_, port_);
}

std::string TcpStoreClient::request(uint8_t op, const std::string& payload, std::chrono::milliseconds serverWait,
                                    const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string where = address();
  if (fd_ < 0) fail(CommErrorKind::kAborted, what, fmt::format("the connection to {} was lost earlier", where));
  std::string frame(1, static_cast<char>(op));
  putBytes(frame, payload);
  // The server answers a wait itself when it times out; allow it that plus slack for the network. Any
  // other request gets the store's timeout, so a dead link fails the caller instead of blocking it forever.
  auto deadline = Clock::now() + std::max(serverWait, timeout_) + std::chrono::seconds(2);
  try {
    writeAll(fd_, frame, where);
    auto header = readExactly(fd_, 5, deadline, where);
    if (!header) {
      ::close(fd_);  // a late answer would be taken for the next request's
      fd_ = -1;
      fail(CommErrorKind::kTimeout, what,
           fmt::format("timed out: the rendezvous store at {} did not answer (is the master, rank 0, reachable?)",
                       where),
           std::max(serverWait, timeout_).count());
    }
    Reader r{*header};
    auto status = static_cast<uint8_t>(r.integer(1));
    uint64_t length = r.integer(4);
    auto body = readExactly(fd_, length, deadline, where);
    if (!body) {
      ::close(fd_);
      fd_ = -1;
      fail(CommErrorKind::kTimeout, what, fmt::format("timed out reading from {}", where));
    }
    if (status == kTimedOut) {
      fail(CommErrorKind::kTimeout, what,
           fmt::format("timed out after {} ms waiting in the rendezvous store at {}", serverWait.count(), where),
           serverWait.count());
    }
    if (status != kOk) {
      ::close(fd_);
      fd_ = -1;
      fail(CommErrorKind::kBackend, what, fmt::format("the rendezvous store at {} refused the request: {}", where,
                                                      *body));
    }
    return *body;
  } catch (const CommError& e) {
    if (e.kind() == CommErrorKind::kPeerFailure && fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    throw;
  }
}

void TcpStoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::string payload;
  putBytes(payload, key);
  putBytes(payload, toString(value));
  request(kSet, payload, std::chrono::milliseconds(0), "store set '" + key + "'");
}

std::vector<uint8_t> TcpStoreClient::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                                const std::vector<uint8_t>& desired) {
  std::string payload;
  putBytes(payload, key);
  putBytes(payload, toString(expected));
  putBytes(payload, toString(desired));
  return toBytes(request(kCompareSet, payload, std::chrono::milliseconds(0), "store compare-set '" + key + "'"));
}

std::vector<uint8_t> TcpStoreClient::get(const std::string& key) {
  std::string payload;
  putU64(payload, static_cast<uint64_t>(timeout_.count()));
  putBytes(payload, key);
  return toBytes(request(kGet, payload, timeout_, "store get '" + key + "'"));
}

int64_t TcpStoreClient::add(const std::string& key, int64_t value) {
  std::string payload;
  putBytes(payload, key);
  putU64(payload, static_cast<uint64_t>(value));
  auto body = request(kAdd, payload, std::chrono::milliseconds(0), "store add '" + key + "'");
  Reader r{body};
  return static_cast<int64_t>(r.integer(8));
}

bool TcpStoreClient::deleteKey(const std::string& key) {
  std::string payload;
  putBytes(payload, key);
  return request(kDelete, payload, std::chrono::milliseconds(0), "store delete '" + key + "'") == std::string(1, 1);
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::string payload;
  putU32(payload, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) putBytes(payload, k);
  return request(kCheck, payload, std::chrono::milliseconds(0), "store check") == std::string(1, 1);
}

int64_t TcpStoreClient::getNumKeys() {
  auto body = request(kNumKeys, "", std::chrono::milliseconds(0), "store count keys");
  Reader r{body};
  return static_cast<int64_t>(r.integer(8));
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::string payload;
  putU64(payload, static_cast<uint64_t>(timeout.count()));
  putU32(payload, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) putBytes(payload, k);
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
  request(kWait, payload, timeout, "store wait for " + names);
}

}  // namespace lockstep::detail

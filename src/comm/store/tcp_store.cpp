// The rendezvous store's client: connect, prove the token, one framed request
// at a time (tcp_store.h describes the protocol).
#include "comm/store/tcp_store.h"

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

#include "comm/store/store_wire.h"
#include "common/posix_io.h"
#include "common/socket_address.h"
#include "lockstep/common/comm_error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/token.h"

namespace lockstep::detail {

using namespace store_wire;

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
                       "may have exited)",
                       where));
    }
  }
  return out;
}

void sendAllOrFail(int fd, const std::string& data, const std::string& where) {
  if (int error = sendAll(fd, data)) {
    fail(CommErrorKind::kPeerFailure, "rendezvous store",
         fmt::format("cannot send to the rendezvous store at {}: {}", where, std::strerror(error)));
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
    : c10d::Store(timeout), host_(std::move(host)), port_(port), token_(std::move(token)) {
  auto deadline = Clock::now() + timeout;
  std::string where = address();
  std::string lastError = "nothing answered";
  for (int attempt = 1;; ++attempt) {
    connect(deadline, lastError);
    if (handshake(token_, deadline, lastError)) return;
    ::close(fd_);
    fd_ = -1;
    if (Clock::now() >= deadline) {
      fail(CommErrorKind::kTimeout, "connect to rendezvous store",
           fmt::format("timed out: the rendezvous store at {} did not admit this process in {} attempts ({})", where,
                       attempt, lastError),
           timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * std::min(attempt, 10)));
  }
}

c10::intrusive_ptr<c10d::Store> TcpStoreClient::clone() {
  return c10::make_intrusive<TcpStoreClient>(host_, port_, token_, timeout_);
}

void TcpStoreClient::connect(Clock::time_point deadline, std::string& lastError) {
  while (fd_ < 0) {
    addrinfo* addresses = resolve(host_, port_, false);
    for (addrinfo* a = addresses; a != nullptr && fd_ < 0; a = a->ai_next) fd_ = tryConnect(a, deadline, lastError);
    freeaddrinfo(addresses);
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline) {
      fail(CommErrorKind::kTimeout, "connect to rendezvous store",
           fmt::format("timed out: cannot reach the master at {} ({}); is rank 0 running and the address one this "
                       "host can reach?",
                       address(), lastError),
           std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool TcpStoreClient::handshake(const std::string& token, Clock::time_point deadline, std::string& lastError) {
  std::string where = address();
  auto handshakeDeadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
  try {
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
    sendAllOrFail(fd_, proof, where);
    auto status = readExactly(fd_, 1, handshakeDeadline, where);
    if (status && static_cast<uint8_t>((*status)[0]) == kOk) {
      auto mac = readExactly(fd_, kMacSize, handshakeDeadline, where);
      if (mac && constantTimeEqual(toBytes(*mac), hmacSha256(token, macInput("server", serverNonce, clientNonce)))) {
        return true;
      }
      ::close(fd_);
      fd_ = -1;
      fail(
          CommErrorKind::kBackend, "connect to rendezvous store",
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
      if (static_cast<uint8_t>((*status)[0]) == kBusy) {
        lastError = reason;
        return false;
      }
    }
    ::close(fd_);
    fd_ = -1;
    fail(CommErrorKind::kBackend, "connect to rendezvous store",
         fmt::format("the rendezvous store at {} refused this process: {}. Every process of a job must hold the same "
                     "job token (`lockstep run` hands its workers one; otherwise set {} or {})",
                     where, reason, kJobTokenVar, kJobTokenFileVar));
  } catch (const CommError& e) {
    // A busy server drops the connections that wait longest for their proof; one of them may be ours.
    if (e.kind() != CommErrorKind::kPeerFailure) throw;
    lastError = e.what();
    return false;
  }
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
    sendAllOrFail(fd_, frame, where);
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
      fail(CommErrorKind::kBackend, what,
           fmt::format("the rendezvous store at {} refused the request: {}", where, *body));
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

// store_server.h — the rendezvous store's server (tcp_store.h describes the
// protocol). One thread runs poll() over the listening socket and every
// connection: store_server.cpp admits connections (the token handshake, the
// limits in StoreLimits) and moves bytes; store_requests.cpp answers the
// requests of admitted clients and keeps the data and the waiters.
// Internal to src/comm.
#pragma once

#include <poll.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store/store_wire.h"
#include "comm/store/tcp_store.h"

namespace lockstep::detail {

class StoreServer {
 public:
  StoreServer(int listenFd, int port, std::string token, StoreLimits limits);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  int refused() const { return refused_.load(); }
  StoreServerStats stats() const;

 private:
  using Clock = store_wire::Clock;
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

  // Connections (store_server.cpp).
  void loop();
  std::vector<pollfd> pollSet(Clock::time_point now) const;
  int64_t nextDeadlineMs(Clock::time_point now) const;
  void acceptAll(Clock::time_point now);
  bool dropOldestPending(const std::string& why);
  void close(int fd);
  void refuse(int fd, const std::string& why, store_wire::Status status = store_wire::kFailed);
  void noteRefusal(const std::string& peer, const std::string& why);
  void summariseRefusals(Clock::time_point now, bool force);
  void readFrom(int fd);
  bool checkProof(int fd);
  void writeTo(int fd);
  void expireHandshakes(Clock::time_point now);
  void publishStats();

  // Requests (store_requests.cpp).
  bool processFrames(int fd);
  void handle(int fd, uint8_t op, const std::string& payload);
  void reply(int fd, store_wire::Status status, const std::string& payload);
  bool present(const std::vector<std::string>& keys) const;
  void put(const std::string& key, std::string value);
  bool erase(const std::string& key);
  void wakeWaiters();
  void expireWaiters(Clock::time_point now);

  int listen_;
  int port_;
  std::string token_;
  StoreLimits limits_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::map<int, Conn> conns_;
  size_t pending_ = 0;  // connections in conns_ that have not proved the token (and are not closing)
  std::vector<Waiter> waiters_;
  std::map<std::string, std::string> data_;
  size_t storedBytes_ = 0;
  Clock::time_point acceptPausedUntil_{};
  // Refusals past the first few are summarised, so a flood cannot flood the log.
  int suppressed_ = 0;
  std::string lastRefusal_;
  Clock::time_point lastSummary_{};
  mutable std::mutex statsMutex_;
  StoreServerStats stats_;
  std::thread thread_;
};

}  // namespace lockstep::detail

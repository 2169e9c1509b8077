// The rendezvous store's server, its requests: the frames of admitted clients,
// the data with its byte limit, and the waiters with their deadlines
// (store_server.h; the connections are in store_server.cpp).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "comm/store/store_server.h"

namespace lockstep::detail {

using namespace store_wire;

namespace {

constexpr size_t kPerKeyOverhead = 64;  // what a key costs beyond its bytes, for the stored-bytes limit
// Longer waits are waits without end; the cap keeps a deadline from overflowing the clock.
constexpr uint64_t kMaxWaitMs = uint64_t{366} * 24 * 3600 * 1000;

/// A request that is well-formed but over a limit: refused with this message as it stands.
struct LimitExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

/// Answers every complete frame in the connection's input; false when the connection was refused or closed.
bool StoreServer::processFrames(int fd) {
  // Handling a request can flush (and on error close) this or another connection: look it up each time.
  for (auto it = conns_.find(fd); it != conns_.end() && it->second.in.size() >= 5; it = conns_.find(fd)) {
    Conn& conn = it->second;
    Reader header{conn.in};
    uint8_t op = static_cast<uint8_t>(header.integer(1));
    uint32_t length = static_cast<uint32_t>(header.integer(4));
    if (length > kMaxFrame) {
      refuse(fd, fmt::format("a request of {} bytes exceeds the limit of {}", length, kMaxFrame));
      return false;
    }
    if (conn.in.size() < 5 + static_cast<size_t>(length)) return true;
    std::string payload = conn.in.substr(5, length);
    conn.in.erase(0, 5 + static_cast<size_t>(length));
    try {
      handle(fd, op, payload);
    } catch (const LimitExceeded& e) {
      refuse(fd, e.what());
      return false;
    } catch (const std::exception& e) {
      refuse(fd, fmt::format("malformed request (op {}): {}", op, e.what()));
      return false;
    }
  }
  return conns_.count(fd) != 0;
}

void StoreServer::reply(int fd, Status status, const std::string& payload) {
  Conn& conn = conns_.at(fd);
  conn.out.push_back(static_cast<char>(status));
  putBytes(conn.out, payload);
}

bool StoreServer::present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

void StoreServer::put(const std::string& key, std::string value) {
  auto it = data_.find(key);
  size_t before = it == data_.end() ? 0 : key.size() + it->second.size() + kPerKeyOverhead;
  size_t after = key.size() + value.size() + kPerKeyOverhead;
  if (storedBytes_ - before + after > limits_.maxStoredBytes) {
    throw LimitExceeded(fmt::format("setting '{}' to {} bytes would make the store hold {} bytes, over its limit of {}",
                                    key.substr(0, 200), value.size(), storedBytes_ - before + after,
                                    limits_.maxStoredBytes));
  }
  storedBytes_ = storedBytes_ - before + after;
  data_[key] = std::move(value);
}

bool StoreServer::erase(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  storedBytes_ -= key.size() + it->second.size() + kPerKeyOverhead;
  data_.erase(it);
  return true;
}

void StoreServer::handle(int fd, uint8_t op, const std::string& payload) {
  Reader r{payload};
  switch (op) {
    case kSet: {
      std::string key = r.bytes();
      put(key, r.bytes());
      reply(fd, kOk, "");
      wakeWaiters();
      return;
    }
    case kGet:
    case kWait: {
      uint64_t timeoutMs = std::min(r.integer(8), kMaxWaitMs);
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
        return;
      }
      auto mine = std::count_if(waiters_.begin(), waiters_.end(), [&](const Waiter& x) { return x.fd == fd; });
      if (static_cast<size_t>(mine) >= limits_.maxWaitersPerClient) {
        throw LimitExceeded(fmt::format("{} waits are already pending on this connection (the limit)", mine));
      }
      waiters_.push_back(std::move(w));
      return;
    }
    case kAdd: {
      std::string key = r.bytes();
      int64_t value = static_cast<int64_t>(r.integer(8));
      auto it = data_.find(key);
      if (it != data_.end() && !it->second.empty()) value += std::stoll(it->second);
      put(key, std::to_string(value));
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
      reply(fd, kOk, std::string(1, erase(r.bytes()) ? 1 : 0));
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
        put(key, desired);
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

void StoreServer::wakeWaiters() {
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

void StoreServer::expireWaiters(Clock::time_point now) {
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
}

}  // namespace lockstep::detail

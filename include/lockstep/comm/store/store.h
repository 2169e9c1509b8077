// lockstep/comm/store/store.h — the key-value store the ranks meet through.
//
// A Store is how ranks find each other before any collective runs: a TCP
// store served by rank 0 at the master address, or an in-memory store shared
// by threads of one process (tests). It wraps the backend's store so no
// backend header leaks into user code. Copies share the same store.
//
// Threads: a Store may be used from several threads. The calls of one process
// to a TCP store share one connection and run one at a time, so a get()
// blocked on a missing key delays the other threads' calls until it returns
// or times out.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

namespace detail {
struct StoreImpl;
struct StoreAccess;
}  // namespace detail

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  ///< the master address
  int port = 29500;                ///< 0 with isServer: any free port (see Store::port)
  bool isServer = false;           ///< rank 0 serves, the others connect
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// The job's shared secret; required. Connections that cannot prove they
  /// know it are refused (and logged by the server with their address).
  std::string token;
  /// Where the server listens; empty: `host` itself (so 127.0.0.1 stays
  /// loopback-only). "0.0.0.0" listens on every interface.
  std::string bindAddr;
};

class Store {
 public:
  /// Connects to (or, with isServer, serves and connects to) lockstep's TCP
  /// store; throws CommError naming host:port: kTimeout when nothing answers in
  /// time, kBackend when the server refuses the token or cannot listen. Throws
  /// Error for an empty token or a port outside 0..65535 (0 only with isServer).
  static Store tcp(const TcpStoreOptions& options);
  /// A store in this process's memory, to be shared by threads acting as ranks.
  static Store inMemory(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  void set(const std::string& key, const std::vector<uint8_t>& value);
  /// Waits (up to the store's timeout) until `key` exists.
  std::vector<uint8_t> get(const std::string& key);
  /// The value of `key` if it exists now, without waiting.
  std::optional<std::vector<uint8_t>> tryGet(const std::string& key);
  int64_t add(const std::string& key, int64_t delta);
  /// A view of this store where every key starts with `prefix` + "/".
  Store withPrefix(const std::string& prefix) const;

  /// The port this process serves on (-1 when it is not the server).
  int port() const;
  /// Connections this process's server refused (wrong token, bad protocol, no proof in time).
  int refusedConnections() const;
  /// "tcp://host:port" or "memory" (for messages).
  std::string description() const;

 private:
  friend struct detail::StoreAccess;  // the communicators reach the backend store (src/comm/store/store_impl.h)
  explicit Store(std::shared_ptr<detail::StoreImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::StoreImpl> impl_;
};

}  // namespace lockstep

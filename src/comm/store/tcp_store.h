// tcp_store.h — lockstep's own rendezvous store over TCP, with a job token.
//
// The server (one thread, poll()) binds to exactly the address it is given —
// loopback unless the user named another — and admits a connection only after
// it proved it knows the job token: the server sends a random nonce, the client
// answers with its own nonce and HMAC-SHA256(token, "client" | both nonces), the
// server answers with HMAC(token, "server" | both nonces) so the client knows
// it reached the real master. A connection that fails the proof, or does not
// give one within kHandshakeTimeout, is closed and logged with its address
// (the first ten one by one, then a summary every 5 s). What a stranger can
// hold is bounded (StoreLimits): a socket and 72 buffered bytes, for at most
// the handshake timeout, at most maxPendingConnections at once; out of file
// descriptors, the server drops the oldest of those instead of spinning.
//
// Once admitted, a client sends length-framed requests (set, get-with-wait,
// add, check, delete, count, compare-and-set, wait); waits are kept by the
// server with their deadlines, so one connection serves one request at a time
// and a timed-out wait leaves it usable. The client implements c10d::Store, so
// ProcessGroupGloo rendezvouses through it unchanged.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace lockstep::detail {

inline constexpr std::chrono::seconds kHandshakeTimeout{10};

/// What the server lets anyone hold. Before the proof, a connection costs a
/// socket and at most kProofSize buffered bytes, and at most
/// `maxPendingConnections` exist: a new one drops the oldest (which is told
/// "busy" and, if it is a real client, retries). After the proof, a client
/// holds the token and is trusted within the remaining limits.
struct StoreLimits {
  std::chrono::milliseconds handshakeTimeout{kHandshakeTimeout};
  size_t maxPendingConnections = 256;
  size_t maxClients = 4096;                 ///< admitted connections; more are refused
  size_t maxStoredBytes = size_t{1} << 30;  ///< keys + values + 64 bytes per key
  size_t maxWaitersPerClient = 64;          ///< a client waits for one request at a time
  size_t maxQueuedReplyBytes = 1u << 20;    ///< stop reading a client that does not read its replies
};

/// What the server holds now and at most so far (tests, the flood bench).
struct StoreServerStats {
  size_t pending = 0, clients = 0, storedBytes = 0, bufferedBytes = 0;
  size_t peakPending = 0, peakConnections = 0, peakBufferedBytes = 0;
  int refused = 0;
};

class StoreServer;

/// Starts a server on host:port (port 0: any free port). Throws CommError naming the address.
std::shared_ptr<StoreServer> startStoreServer(const std::string& host, int port, const std::string& token,
                                              const StoreLimits& limits = {});
int serverPort(const StoreServer& server);
/// Connections refused so far (tests, logs).
int refusedConnections(const StoreServer& server);
StoreServerStats serverStats(const StoreServer& server);

class TcpStoreClient : public c10d::Store {
 public:
  /// Connects (retrying until `timeout` while nothing listens) and proves the
  /// token. CommError kTimeout when nobody answers, kBackend when refused.
  TcpStoreClient(std::string host, int port, std::string token, std::chrono::milliseconds timeout);
  ~TcpStoreClient() override;

  /// A second connection to the same server (c10d uses one per thread that talks to the store).
  c10::intrusive_ptr<c10d::Store> clone() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  std::string address() const;

 private:
  void connect(std::chrono::steady_clock::time_point deadline, std::string& lastError);
  /// True when admitted; false when the server was busy or dropped the connection (try again).
  bool handshake(const std::string& token, std::chrono::steady_clock::time_point deadline, std::string& lastError);
  std::string request(uint8_t op, const std::string& payload, std::chrono::milliseconds serverWait,
                      const std::string& what);
  std::string host_;
  int port_;
  std::string token_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace lockstep::detail

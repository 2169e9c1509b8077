// store_wire.h — the bytes lockstep's rendezvous store speaks (tcp_store.h
// describes the protocol): framing helpers, op codes, the HMAC input, and the
// CommError every failure of the store becomes. Shared by the server
// (store_server.cpp) and the client (tcp_store.cpp) only.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/common/comm_error.h"

namespace lockstep::detail::store_wire {

using Clock = std::chrono::steady_clock;

inline constexpr char kMagic[8] = {'L', 'K', 'S', 'T', 'O', 'R', 'E', '1'};
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
inline constexpr size_t kGreetingSize = sizeof(kMagic) + kNonceSize;          // server -> client
inline constexpr size_t kProofSize = sizeof(kMagic) + kNonceSize + kMacSize;  // client -> server
inline constexpr uint32_t kMaxFrame = 256u << 20;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys, kCompareSet, kWait };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2, kBusy = 3 };  // kBusy: try again

void putU32(std::string& out, uint32_t v);
void putU64(std::string& out, uint64_t v);
void putBytes(std::string& out, const std::string& s);

/// Reads the fields of one frame; any overrun throws, so a malformed frame never reads past its end.
struct Reader {
  const std::string& data;
  size_t pos = 0;
  uint64_t integer(int bytes);
  std::string bytes();
};

/// What the HMAC of one side covers: the side's name and both nonces.
std::vector<uint8_t> macInput(const char* side, const std::string& serverNonce, const std::string& clientNonce);

std::string toString(const std::vector<uint8_t>& v);
std::vector<uint8_t> toBytes(const std::string& s);

[[noreturn]] void fail(CommErrorKind kind, const std::string& op, const std::string& detail, int64_t timeoutMs = -1);

/// getaddrinfo for host:port; the caller frees the list. Throws CommError naming the address.
addrinfo* resolve(const std::string& host, int port, bool passive);

}  // namespace lockstep::detail::store_wire

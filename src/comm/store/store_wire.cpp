#include "comm/store/store_wire.h"

#include <fmt/format.h>

namespace lockstep::detail::store_wire {

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

uint64_t Reader::integer(int bytes) {
  if (data.size() - pos < static_cast<size_t>(bytes)) throw std::runtime_error("frame too short");
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data[pos + i])) << (8 * i);
  pos += bytes;
  return v;
}

std::string Reader::bytes() {
  uint64_t n = integer(4);
  if (data.size() - pos < n) throw std::runtime_error("field longer than its frame");
  std::string s = data.substr(pos, n);
  pos += n;
  return s;
}

std::vector<uint8_t> macInput(const char* side, const std::string& serverNonce, const std::string& clientNonce) {
  std::vector<uint8_t> in(side, side + std::strlen(side));
  in.insert(in.end(), serverNonce.begin(), serverNonce.end());
  in.insert(in.end(), clientNonce.begin(), clientNonce.end());
  return in;
}

std::string toString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> toBytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

void fail(CommErrorKind kind, const std::string& op, const std::string& detail, int64_t timeoutMs) {
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

}  // namespace lockstep::detail::store_wire

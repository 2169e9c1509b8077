// lockstep/common/token.h — job tokens and the HMAC that proves one is known.
//
// A job token is the shared secret every process of one job holds; the
// rendezvous store admits only connections that prove they know it (HMAC-SHA256
// over both sides' random nonces, so the token itself never crosses the
// network). OpenSSL's libcrypto provides the hash and the random bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

class Environment;

inline constexpr const char* kJobTokenVar = "LOCKSTEP_JOB_TOKEN";
inline constexpr const char* kJobTokenFileVar = "LOCKSTEP_JOB_TOKEN_FILE";

/// `n` bytes from the operating system's cryptographic random source.
std::vector<uint8_t> randomBytes(size_t n);
/// A fresh random token: 64 hex characters (256 bits).
std::string randomToken();
/// HMAC-SHA256 of `data` keyed with `key`.
std::vector<uint8_t> hmacSha256(const std::string& key, const std::vector<uint8_t>& data);
/// Compares in time independent of where the inputs differ.
bool constantTimeEqual(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

/// Reads a token file: the first line, surrounding white space removed.
/// ConfigError naming `source` and the path when unreadable or empty.
std::string readTokenFile(const std::string& path, const std::string& source);
/// The token from LOCKSTEP_JOB_TOKEN, else the file LOCKSTEP_JOB_TOKEN_FILE names; nullopt when
/// neither is set. ConfigError for an empty LOCKSTEP_JOB_TOKEN or a file readTokenFile refuses.
std::optional<std::string> tokenFromEnvironment(const Environment& env);

}  // namespace lockstep

#include "lockstep/common/token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <sys/stat.h>

#include <fstream>

#include <fmt/format.h>

#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"

namespace lockstep {

std::vector<uint8_t> randomBytes(size_t n) {
  std::vector<uint8_t> out(n);
  if (n > 0 && RAND_bytes(out.data(), static_cast<int>(n)) != 1) {
    throw Error("cannot draw random bytes for the job token (OpenSSL RAND_bytes failed)");
  }
  return out;
}

std::string randomToken() {
  auto bytes = randomBytes(32);
  std::string hex;
  for (uint8_t b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::vector<uint8_t> hmacSha256(const std::string& key, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out.data(), &length) ==
      nullptr) {
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  }
  out.resize(length);
  return out;
}

bool constantTimeEqual(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

/// A secret shorter than this is guessable; randomToken() draws 64 hex characters.
constexpr size_t kMinTokenLength = 32;

void warnIfShort(const std::string& token, const std::string& where) {
  if (token.size() < kMinTokenLength) {
    log::warn(
        fmt::format("{}: the job token is {} characters; use at least {} random ones (e.g. `openssl rand "
                    "-hex 32`): anyone who guesses it can join the job",
                    where, token.size(), kMinTokenLength));
  }
}

}  // namespace

std::string readTokenFile(const std::string& path, const std::string& source) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the job token file '{}'", source, path));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    log::warn(fmt::format("{}: the job token file '{}' is readable by other users (mode {:04o}); `chmod 600 {}`",
                          source, path, st.st_mode & 07777, path));
  }
  std::string line;
  std::getline(in, line);
  auto first = line.find_first_not_of(" \t\r\n");
  auto last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) {
    throw ConfigError(
        fmt::format("{}: the job token file '{}' is empty; expected a secret on its first line", source, path));
  }
  std::string token = line.substr(first, last - first + 1);
  warnIfShort(token, fmt::format("{} '{}'", source, path));
  return token;
}

std::optional<std::string> tokenFromEnvironment(const Environment& env) {
  if (auto token = env.get(kJobTokenVar)) {
    if (token->empty()) throw ConfigError(fmt::format("{} is set but empty; expected the job's secret", kJobTokenVar));
    warnIfShort(*token, kJobTokenVar);
    return token;
  }
  if (auto file = env.get(kJobTokenFileVar)) return readTokenFile(*file, kJobTokenFileVar);
  return std::nullopt;
}

}  // namespace lockstep

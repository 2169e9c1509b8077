#include "lockstep/common/env.h"

#include <unistd.h>  // environ

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "lockstep/common/error.h"

namespace lockstep {

Environment Environment::fromProcess() {
  std::map<std::string, std::string> vars;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string kv(*entry);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return Environment(std::move(vars));
}

std::optional<std::string> Environment::get(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

int64_t parseInt(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    throw ConfigError(what + "='" + text + "' is not an integer");
  }
  if (value < lo || value > hi) {
    throw ConfigError(what + "=" + text + " is out of range; expected " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  }
  return value;
}

std::optional<int64_t> Environment::getInt(const std::string& name, int64_t lo, int64_t hi) const {
  auto text = get(name);
  if (!text) return std::nullopt;
  return parseInt(*text, "environment variable " + name, lo, hi);
}

std::optional<std::chrono::milliseconds> Environment::getSeconds(const std::string& name) const {
  auto text = get(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double seconds = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || errno == ERANGE || !std::isfinite(seconds) ||
      seconds < 0) {
    throw ConfigError("environment variable " + name + "='" + *text + "' is not a non-negative number of seconds");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace lockstep

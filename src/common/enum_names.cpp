#include "lockstep/common/enum_names.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

#include "lockstep/common/error.h"

namespace lockstep::detail {

bool equalIgnoringCase(const std::string& a, const char* b) {
  if (a.size() != std::strlen(b)) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

void throwUnknownName(const std::string& what, const std::string& text, const std::vector<const char*>& names) {
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  }
  throw ConfigError(fmt::format("{} '{}' is unknown; expected {}", what, text, expected));
}

}  // namespace lockstep::detail

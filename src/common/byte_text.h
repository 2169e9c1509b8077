// byte_text.h — byte counts as messages and reports print them: "512 B", "4.0 KiB", "1.5 MiB".
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace lockstep::detail {

inline std::string formatBytes(int64_t b) {
  if (b >= (int64_t(1) << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

}  // namespace lockstep::detail

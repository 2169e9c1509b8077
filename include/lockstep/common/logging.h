// lockstep/common/logging.h — one logger for every line lockstep prints.
//
// Lines go to stderr as "[lockstep <time> r<rank> <LEVEL>] message". The level
// comes from LOCKSTEP_LOG_LEVEL (trace, debug, info, warn, error, off; default
// info) or setLevel(). Thread-safe; a line is written with one write(2).
#pragma once

#include <string>

namespace lockstep::log {

enum class Level { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

void setLevel(Level level);
Level level();
/// Parses "trace".."off" (case-insensitive); throws ConfigError naming `what`.
Level parseLevel(const std::string& text, const std::string& what);
/// The rank printed on each line; -1 (the default) prints none.
void setRank(int rank);

void write(Level level, const std::string& message);
inline bool enabled(Level l) { return l >= level(); }

inline void trace(const std::string& m) {
  if (enabled(Level::kTrace)) write(Level::kTrace, m);
}
inline void debug(const std::string& m) {
  if (enabled(Level::kDebug)) write(Level::kDebug, m);
}
inline void info(const std::string& m) {
  if (enabled(Level::kInfo)) write(Level::kInfo, m);
}
inline void warn(const std::string& m) {
  if (enabled(Level::kWarn)) write(Level::kWarn, m);
}
inline void error(const std::string& m) {
  if (enabled(Level::kError)) write(Level::kError, m);
}

}  // namespace lockstep::log

#include "lockstep/common/logging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep::log {
namespace {

Level levelFromEnvironment() {
  // One getenv, not a copy of the whole environment: this may run on any thread.
  const char* text = std::getenv(env::kLogLevel);
  if (!text) return Level::kInfo;
  try {
    return parseLevel(text, env::kLogLevel);
  } catch (const ConfigError&) {
    return Level::kInfo;  // a bad level must not stop a run; it is reported at init
  }
}

std::atomic<int>& levelStorage() {
  static std::atomic<int> value{static_cast<int>(levelFromEnvironment())};
  return value;
}
// Read the level and the time zone (localtime_r reads TZ on first use) while the library loads,
// on one thread: the first log line may come from a background thread (the rendezvous store's)
// while the main thread calls setenv (MPI start-up), and reading the environment during a setenv
// crashed a worker (SIGSEGV in the store thread).
[[maybe_unused]] const bool kEnvironmentReadAtLoad = (levelStorage(), ::tzset(), true);
std::atomic<int> gRank{-1};

const char* levelName(Level l) {
  switch (l) {
    case Level::kTrace: return "TRACE";
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarn: return "WARN";
    case Level::kError: return "ERROR";
    case Level::kOff: return "OFF";
  }
  return "?";
}
}  // namespace

void setLevel(Level l) { levelStorage().store(static_cast<int>(l)); }
Level level() { return static_cast<Level>(levelStorage().load()); }
void setRank(int rank) { gRank.store(rank); }

Level parseLevel(const std::string& text, const std::string& what) {
  static constexpr EnumName<Level> kNames[] = {
      {Level::kTrace, "trace"},  {Level::kDebug, "debug"}, {Level::kInfo, "info"}, {Level::kWarn, "warn"},
      {Level::kWarn, "warning"}, {Level::kError, "error"}, {Level::kOff, "off"},   {Level::kOff, "none"}};
  return parseEnum(kNames, text, what);
}

void write(Level l, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  int millis =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  int rank = gRank.load();
  std::string rankText = rank >= 0 ? fmt::format(" r{}", rank) : std::string();
  std::string line = fmt::format("[lockstep {:02}:{:02}:{:02}.{:03}{} {}] {}\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                                 millis, rankText, levelName(l), message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace lockstep::log

#include "monitor/run_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"

namespace lockstep::detail {

namespace fs = std::filesystem;

void createDirectories(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Another rank may create it at the same moment: only a missing directory is an error.
  if (ec && !fs::is_directory(dir)) {
    throw Error(
        fmt::format("monitor: cannot create the run directory {}: {} (set monitor.dir to a writable "
                    "directory, or monitor.dir=off)",
                    dir, ec.message()));
  }
  if (!fs::is_directory(dir)) {
    throw Error(fmt::format("monitor: {} exists and is not a directory (monitor.dir must name a directory)", dir));
  }
}

std::string runNameOf(const std::string& dir) {
  auto path = fs::absolute(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

double unixNow() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

AppendFile::~AppendFile() {
  flush();
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error(
        fmt::format("monitor: cannot open {} for writing: {} (set monitor.dir to a writable directory, "
                    "or monitor.dir=off)",
                    path, std::strerror(errno)));
  }
  struct stat st {};
  wasEmpty_ = ::fstat(fd_, &st) != 0 || st.st_size == 0;
}

void AppendFile::append(std::string_view text) {
  if (fd_ >= 0) buffer_.append(text);
}

void AppendFile::flush() {
  if (fd_ < 0 || buffer_.empty()) return;
  if (int error = writeAll(fd_, buffer_)) {
    fail("write", error);
    return;
  }
  buffer_.clear();
}

void AppendFile::fail(const std::string& what, int error) {
  log::warn(fmt::format("monitor: {} of {} failed: {}; this file is no longer written, training goes on", what, path_,
                        std::strerror(error)));
  ::close(fd_);
  fd_ = -1;
  buffer_.clear();
  buffer_.shrink_to_fit();
}

void warnOnce(bool& flag, const std::string& what, const std::string& reason) {
  if (flag) return;
  flag = true;
  log::warn(fmt::format("monitor: {} failed: {}; training goes on (further failures are not reported)", what, reason));
}

}  // namespace lockstep::detail

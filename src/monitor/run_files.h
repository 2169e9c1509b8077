// run_files.h — how the monitor layer writes files (internal).
//
// Everything here is written so that monitoring cannot stop training: opening
// a file (at start) throws lockstep::Error naming the path, but once open an
// AppendFile swallows write errors, logs one warning naming the file and the
// reason, and drops everything written to it afterwards.
#pragma once

#include <string>
#include <string_view>

#include "common/posix_io.h"  // writeFileAtomically, hostName: the run files use both

namespace lockstep::detail {

/// Creates `dir` and its parents; throws Error naming `dir` when it cannot.
void createDirectories(const std::string& dir);

/// The last component of `dir` (runs/fashion/ gives "fashion").
std::string runNameOf(const std::string& dir);

/// Seconds since the Unix epoch, with sub-second precision.
double unixNow();

/// A file opened for appending, written through a buffer.
class AppendFile {
 public:
  AppendFile() = default;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  /// Opens (creating) `path` for appending. Throws Error naming the path.
  void open(const std::string& path);
  /// True when the file was empty or absent when opened.
  bool wasEmpty() const { return wasEmpty_; }
  /// False once a write failed (or before open()).
  bool ok() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  /// Buffers `text`; nothing reaches the file before flush().
  void append(std::string_view text);
  /// Writes the buffer. On failure logs one warning and closes the file.
  void flush();
  /// append() then flush().
  void writeLine(std::string_view line) {
    append(line);
    flush();
  }

 private:
  void fail(const std::string& what, int error);

  int fd_ = -1;
  bool wasEmpty_ = true;
  std::string path_;
  std::string buffer_;
};

/// Logs "monitor: <what> failed: <reason>; ..." once per `flag`. For the
/// callbacks' catch blocks: an unexpected error in monitoring must not stop training.
void warnOnce(bool& flag, const std::string& what, const std::string& reason);

}  // namespace lockstep::detail

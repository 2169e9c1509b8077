// posix_io.h — the small POSIX helpers every layer needs, once: an owned file
// descriptor, complete writes, atomic file replacement, the host name.
// Internal to lockstep (not installed).
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

namespace lockstep::detail {

/// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

/// Writes all of `data` to `fd`, through short writes and EINTR. Returns 0, or
/// the errno of the write that failed. Allocates nothing and is
/// async-signal-safe: a forked child may call it before exec.
int writeAll(int fd, std::string_view data) noexcept;
/// The same over a socket with send(MSG_NOSIGNAL): a closed peer gives EPIPE, not SIGPIPE.
int sendAll(int fd, std::string_view data) noexcept;

/// How hard writeFileAtomically works to survive a machine crash.
enum class Durability {
  kProcessCrash,  ///< rename only: readers never see a partial file; a power loss may lose the new one
  kMachineCrash,  ///< also fsync the file before and its directory after the rename (checkpoints, reports)
};

/// Replaces `path` with the concatenation of `pieces` atomically: a temporary
/// file beside it (".<name>.tmp-XXXXXX", mode 0666 minus the umask), renamed
/// over `path`; the parent directory is created when missing. On failure the
/// temporary file is removed and `path` is untouched. Throws lockstep::Error
/// naming the file and the system's reason.
void writeFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                         Durability durability);

/// Hands each next piece of a file's contents to the writer (any number of calls).
using PieceSink = std::function<void(std::string_view)>;
/// The same, with the contents streamed: `headerSize` bytes are reserved at the
/// start, `produce` writes the rest through the sink it is given (small pieces
/// are buffered, large ones written as they are: nothing holds the whole file),
/// then `header()` — exactly `headerSize` bytes, which may depend on what was
/// produced (a length, a checksum) — is written over the reserved start.
void writeFileAtomically(const std::string& path, size_t headerSize,
                         const std::function<void(const PieceSink&)>& produce,
                         const std::function<std::string()>& header, Durability durability);

/// This machine's host name ("unknown" when it has none).
std::string hostName();

}  // namespace lockstep::detail

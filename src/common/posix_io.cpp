#include "common/posix_io.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace fs = std::filesystem;

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

template <typename WriteFn>
int writeAllWith(std::string_view data, WriteFn&& write) noexcept {
  while (!data.empty()) {
    ssize_t n = write(data);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

int writeAll(int fd, std::string_view data) noexcept {
  return writeAllWith(data, [fd](std::string_view d) { return ::write(fd, d.data(), d.size()); });
}

int sendAll(int fd, std::string_view data) noexcept {
  return writeAllWith(data, [fd](std::string_view d) { return ::send(fd, d.data(), d.size(), MSG_NOSIGNAL); });
}

namespace {

[[noreturn]] void fail(const std::string& what, int error) {
  throw Error(fmt::format("{}: {}", what, std::strerror(error)));
}

void syncDirectory(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) fail("cannot open directory " + dir.string() + " to sync it", errno);
  if (::fsync(fd.get()) != 0) fail("fsync of directory " + dir.string() + " failed", errno);
}

}  // namespace

namespace {

/// Creates the temporary file beside `path`, lets `write` fill it, then syncs and renames it over `path`.
void replaceAtomically(const std::string& path, Durability durability,
                       const std::function<void(int, const std::string&)>& write) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()));
  std::string name = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> tmpName(name.begin(), name.end());
  tmpName.push_back('\0');
  Fd fd(::mkstemp(tmpName.data()));
  if (!fd.valid()) fail("cannot create a temporary file for " + path, errno);
  const std::string tmp(tmpName.data());
  try {
    mode_t mask = ::umask(0);  // mkstemp makes 0600; give the file the mode any new file gets
    ::umask(mask);
    ::fchmod(fd.get(), 0666 & ~mask);
    write(fd.get(), tmp);
    if (durability == Durability::kMachineCrash && ::fsync(fd.get()) != 0) fail("syncing " + tmp + " failed", errno);
    if (::close(fd.release()) != 0) fail("closing " + tmp + " failed", errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming " + tmp + " to " + path + " failed", errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (durability == Durability::kMachineCrash) syncDirectory(dir);
}

}  // namespace

void writeFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                         Durability durability) {
  replaceAtomically(path, durability, [&](int fd, const std::string& tmp) {
    size_t total = 0, done = 0;
    for (std::string_view piece : pieces) total += piece.size();
    for (std::string_view piece : pieces) {
      if (int error = writeAll(fd, piece)) {
        fail(fmt::format("writing {} failed after {} of {} bytes", tmp, done, total), error);
      }
      done += piece.size();
    }
  });
}

void writeFileAtomically(const std::string& path, size_t headerSize,
                         const std::function<void(const PieceSink&)>& produce,
                         const std::function<std::string()>& header, Durability durability) {
  constexpr size_t kBuffer = size_t(1) << 20;  // pieces smaller than this are gathered, larger ones go straight
  replaceAtomically(path, durability, [&](int fd, const std::string& tmp) {
    size_t done = 0;
    std::string pending(headerSize, '\0');  // reserved for the header
    pending.reserve(kBuffer);
    auto flush = [&](std::string_view bytes) {
      if (int error = writeAll(fd, bytes)) fail(fmt::format("writing {} failed after {} bytes", tmp, done), error);
      done += bytes.size();
    };
    produce([&](std::string_view piece) {
      if (pending.size() + piece.size() <= kBuffer) {
        pending.append(piece);
        return;
      }
      flush(pending);
      pending.clear();
      if (piece.size() >= kBuffer) {
        flush(piece);
      } else {
        pending.append(piece);
      }
    });
    flush(pending);
    const std::string head = header();
    LOCKSTEP_ASSERT(head.size() == headerSize, "file header of ", head.size(), " bytes, ", headerSize, " reserved");
    if (::pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
      fail("writing the header of " + tmp + " failed", errno);
    }
  });
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

}  // namespace lockstep::detail

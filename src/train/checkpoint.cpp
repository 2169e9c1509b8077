#include "lockstep/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string_view>

#include <fmt/format.h>

#include "common/posix_io.h"
#include "lockstep/common/checksum.h"

namespace lockstep {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[16] = {'L', 'O', 'C', 'K', 'S', 'T', 'E', 'P', '-', 'C', 'K', 'P', 'T', '-', 'v', '2'};
// Version 1 framed a LibTorch archive (a TorchScript zip): refused, never parsed.
constexpr char kMagicV1[16] = {'L', 'O', 'C', 'K', 'S', 'T', 'E', 'P', '-', 'C', 'K', 'P', 'T', '-', 'v', '1'};
constexpr size_t kHeaderSize = 32;

std::string errnoText() { return std::strerror(errno); }

/// The 32-byte frame header of a payload of `size` bytes with CRC-32C `crc`.
std::string frameHeader(uint64_t size, uint32_t crc) {
  std::string out(kHeaderSize, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<char>((size >> (8 * i)) & 0xFF);
  for (int i = 0; i < 4; ++i) out[24 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  return out;
}

std::string frameHeader(std::string_view payload) {
  return frameHeader(payload.size(), crc32c(payload.data(), payload.size()));
}

/// Reads up to `n` bytes into `out`, fewer only at the end of the file. Throws CheckpointError.
size_t readUpTo(int fd, char* out, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::read(fd, out + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw CheckpointError(fmt::format("cannot read checkpoint {}: {}", path, errnoText()));
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

std::string frameCheckpoint(const std::string& payload) { return frameHeader(payload) + payload; }

std::string readCheckpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(fmt::format("cannot open checkpoint {}: {}", path, errnoText()));
  detail::Fd closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw CheckpointError(fmt::format("cannot stat checkpoint {}: {}", path, errnoText()));
  const uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  char header[kHeaderSize];
  const size_t headerBytes = readUpTo(fd, header, kHeaderSize, path);
  if (headerBytes >= sizeof(kMagicV1) && std::memcmp(header, kMagicV1, sizeof(kMagicV1)) == 0) {
    throw ObsoleteCheckpointError::about(path);
  }
  if (headerBytes < kHeaderSize || std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError(
        fmt::format("{} is not a lockstep checkpoint (no LOCKSTEP-CKPT-v2 header; {} bytes)", path, fileSize));
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  for (int i = 0; i < 8; ++i) size |= static_cast<uint64_t>(static_cast<uint8_t>(header[16 + i])) << (8 * i);
  for (int i = 0; i < 4; ++i) crc |= static_cast<uint32_t>(static_cast<uint8_t>(header[24 + i])) << (8 * i);
  // Sizes are checked against the file before anything of `size` is allocated.
  if (fileSize - kHeaderSize < size) {
    throw CheckpointError(
        fmt::format("checkpoint {} is truncated: {} of {} bytes present", path, fileSize, size + kHeaderSize));
  }
  if (fileSize - kHeaderSize > size) {
    throw CheckpointError(
        fmt::format("checkpoint {} has {} unexpected trailing bytes", path, fileSize - kHeaderSize - size));
  }
  std::string payload(static_cast<size_t>(size), '\0');
  const size_t got = readUpTo(fd, payload.data(), payload.size(), path);
  if (got != size) {  // shrunk since fstat
    throw CheckpointError(
        fmt::format("checkpoint {} is truncated: {} of {} bytes present", path, kHeaderSize + got, size + kHeaderSize));
  }
  uint32_t actual = crc32c(payload.data(), payload.size());
  if (actual != crc) {
    throw CheckpointError(
        fmt::format("checkpoint {} is corrupt: CRC-32C {:08x} does not match the recorded {:08x}", path, actual, crc));
  }
  return payload;
}

CheckpointDir::CheckpointDir(std::string dir, int keepLast) : dir_(std::move(dir)), keepLast_(keepLast) {
  LOCKSTEP_CHECK(keepLast_ >= 1, "checkpoint.keep_last must be at least 1, got ", keepLast_);
}

std::string CheckpointDir::pathFor(int64_t step) const {
  return (fs::path(dir_) / fmt::format("step-{:09d}.ckpt", step)).string();
}

std::string CheckpointDir::save(int64_t step, const std::string& payload) {
  std::string path = pathFor(step);
  detail::writeFileAtomically(path, {frameHeader(payload), payload}, detail::Durability::kMachineCrash);
  prune();
  return path;
}

std::string CheckpointDir::save(int64_t step, const TensorArchive& archive) {
  std::string path = pathFor(step);
  uint64_t size = 0;
  uint32_t crc = 0;
  detail::writeFileAtomically(
      path, kHeaderSize,
      [&](const detail::PieceSink& write) {
        archive.writeTo([&](std::string_view piece) {
          crc = crc32c(piece.data(), piece.size(), crc);
          size += piece.size();
          write(piece);
        });
      },
      [&] { return frameHeader(size, crc); }, detail::Durability::kMachineCrash);
  prune();
  return path;
}

void CheckpointDir::prune() const {
  auto entries = list();
  while (static_cast<int>(entries.size()) > keepLast_) {
    std::error_code ec;
    fs::remove(entries.front().path, ec);
    entries.erase(entries.begin());
  }
}

std::vector<CheckpointEntry> CheckpointDir::list() const {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() != 19 || name.rfind("step-", 0) != 0 || name.substr(14) != ".ckpt") continue;
    std::string digits = name.substr(5, 9);
    if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.push_back({std::stoll(digits), entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

}  // namespace lockstep

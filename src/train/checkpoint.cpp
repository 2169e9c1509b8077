#include "lockstep/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "lockstep/common/checksum.h"

namespace lockstep {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[16] = {'L', 'O', 'C', 'K', 'S', 'T', 'E', 'P', '-', 'C', 'K', 'P', 'T', '-', 'v', '2'};
// Version 1 framed a LibTorch archive (a TorchScript zip): refused, never parsed.
constexpr char kMagicV1[16] = {'L', 'O', 'C', 'K', 'S', 'T', 'E', 'P', '-', 'C', 'K', 'P', 'T', '-', 'v', '1'};
constexpr size_t kHeaderSize = 32;

std::string errnoText() { return std::strerror(errno); }

void fsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open {} to sync it: {}", path, errnoText()));
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) throw Error(fmt::format("fsync of {} failed: {}", path, std::strerror(saved)));
}
}  // namespace

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create directory {}: {}", dir.string(), ec.message()));
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(fmt::format("cannot create {}: {}", tmp, errnoText()));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int saved = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw Error(fmt::format("writing {} failed after {} of {} bytes: {}", tmp, done, bytes.size(),
                                std::strerror(saved)));
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
      ::unlink(tmp.c_str());
      throw Error(fmt::format("syncing {} failed: {}", tmp, errnoText()));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("renaming {} to {} failed: {}", tmp, path, std::strerror(saved)));
  }
  fsyncPath(dir.string(), O_RDONLY | O_DIRECTORY);
}

std::string frameCheckpoint(const std::string& payload) {
  std::string out(kHeaderSize, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  uint64_t size = payload.size();
  uint32_t crc = crc32c(payload.data(), payload.size());
  for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<char>((size >> (8 * i)) & 0xFF);
  for (int i = 0; i < 4; ++i) out[24 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  out += payload;
  return out;
}

std::string readCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("cannot open checkpoint {}: {}", path, errnoText()));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() >= sizeof(kMagicV1) && std::memcmp(data.data(), kMagicV1, sizeof(kMagicV1)) == 0) {
    throw ObsoleteCheckpointError(fmt::format("{} was written by an older lockstep (torch archive format); it cannot "
                                              "be loaded safely — retrain or convert", path));
  }
  if (data.size() < kHeaderSize || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError(fmt::format("{} is not a lockstep checkpoint (no LOCKSTEP-CKPT-v2 header; {} bytes)", path,
                                      data.size()));
  }
  uint64_t size = 0;
  uint32_t crc = 0;
  for (int i = 0; i < 8; ++i) size |= static_cast<uint64_t>(static_cast<uint8_t>(data[16 + i])) << (8 * i);
  for (int i = 0; i < 4; ++i) crc |= static_cast<uint32_t>(static_cast<uint8_t>(data[24 + i])) << (8 * i);
  if (data.size() - kHeaderSize < size) {
    throw CheckpointError(fmt::format("checkpoint {} is truncated: {} of {} bytes present", path, data.size(),
                                      size + kHeaderSize));
  }
  if (data.size() - kHeaderSize > size) {
    throw CheckpointError(fmt::format("checkpoint {} has {} unexpected trailing bytes", path,
                                      data.size() - kHeaderSize - size));
  }
  std::string payload = data.substr(kHeaderSize);
  uint32_t actual = crc32c(payload.data(), payload.size());
  if (actual != crc) {
    throw CheckpointError(fmt::format("checkpoint {} is corrupt: CRC-32C {:08x} does not match the recorded {:08x}",
                                      path, actual, crc));
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
  writeFileAtomically(path, frameCheckpoint(payload));
  auto entries = list();
  while (static_cast<int>(entries.size()) > keepLast_) {
    std::error_code ec;
    fs::remove(entries.front().path, ec);
    entries.erase(entries.begin());
  }
  return path;
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

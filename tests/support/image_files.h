// image_files.h — what the image dataset tests share: a temporary
// directory, raw and gzip file writers, IDX framing, a tensor's bytes, and the
// check that get() from four threads returns what a serial pass returned.
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/data/image_dataset.h"

namespace lockstep::test {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

/// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lockstep_images_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

inline void writeFile(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void writeGzip(const std::string& path, const Bytes& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

inline Bytes readGzip(const std::string& path) {
  Bytes out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  std::array<uint8_t, 1 << 16> buf{};
  int n = 0;
  while ((n = gzread(f, buf.data(), buf.size())) > 0) out.insert(out.end(), buf.begin(), buf.begin() + n);
  gzclose(f);
  return out;
}

inline void putBigEndian(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
}

inline Bytes idxFile(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  putBigEndian(b, magic);
  for (uint32_t d : dims) putBigEndian(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

inline Bytes tensorBytes(const at::Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.scalar_type(), at::kByte);
  const auto* p = t.data_ptr<uint8_t>();
  return Bytes(p, p + t.numel());
}

inline std::vector<int64_t> sizesOf(const at::Tensor& t) { return t.sizes().vec(); }

/// get() of every index from four threads, 25 rounds each, equals a serial pass.
inline void expectSameFromFourThreads(const ImageDataset& ds) {
  const int64_t n = ds.size();
  std::vector<Bytes> serial;
  std::vector<int64_t> serialLabels;
  for (int64_t i = 0; i < n; ++i) {
    auto [image, label] = ds.get(i);
    serial.push_back(tensorBytes(image));
    serialLabels.push_back(label);
  }
  constexpr int kThreads = 4, kRounds = 25;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = (k * (2 * t + 1) + round) % n;  // a different order per thread
          try {
            auto [image, label] = ds.get(i);
            const auto* p = image.data_ptr<uint8_t>();
            const Bytes& want = serial[static_cast<size_t>(i)];
            if (label != serialLabels[static_cast<size_t>(i)] || image.numel() != static_cast<int64_t>(want.size()) ||
                std::memcmp(p, want.data(), want.size()) != 0) {
              ++mismatches;
            }
          } catch (...) { ++errors; }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace lockstep::test

#include <gtest/gtest.h>

#include <string>
using namespace std::string_literals;

#include <filesystem>
#include <fstream>

#include "lockstep/common/checksum.h"
#include "lockstep/train/checkpoint.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(Checksum, Crc32cKnownVectors) {
  // RFC 3720 (iSCSI) test vectors.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Incremental equals one shot.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Checkpoint, RoundTripAndAtomicWrite) {
  std::string dir = test::makeTempDir();
  std::string path = dir + "/sub/x.ckpt";
  std::string payload = "payload with \0 bytes"s;
  writeFileAtomically(path, frameCheckpoint(payload));
  EXPECT_EQ(readCheckpoint(path), payload);
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir + "/sub")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Checkpoint, TruncatedCorruptAndForeignFilesAreNamed) {
  std::string dir = test::makeTempDir();
  std::string path = dir + "/c.ckpt";
  std::string framed = frameCheckpoint(std::string(1000, 'x'));
  writeAll(path, framed.substr(0, 500));
  try {
    readCheckpoint(path);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path + " is truncated: 500 of 1032 bytes present"), std::string::npos) << e.what();
  }
  std::string flipped = framed;
  flipped[700] ^= 1;
  writeAll(path, flipped);
  try {
    readCheckpoint(path);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path + " is corrupt: CRC-32C"), std::string::npos) << e.what();
  }
  writeAll(path, "hello");
  try {
    readCheckpoint(path);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a lockstep checkpoint"), std::string::npos) << e.what();
  }
  EXPECT_THROW(readCheckpoint(dir + "/missing.ckpt"), CheckpointError);
}

TEST(Checkpoint, DirectoryKeepsTheLastK) {
  std::string dir = test::makeTempDir();
  CheckpointDir ckpts(dir, 2);
  for (int64_t step : {5, 10, 15, 20}) ckpts.save(step, "s" + std::to_string(step));
  auto entries = ckpts.list();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].step, 15);
  EXPECT_EQ(entries[1].step, 20);
  EXPECT_EQ(readCheckpoint(entries[1].path), "s20");
  EXPECT_EQ(fs::path(entries[1].path).filename(), "step-000000020.ckpt");
  EXPECT_THROW(CheckpointDir(dir, 0), Error);
}

TEST(Checkpoint, WriteIntoAnUnwritableDirectoryFailsWithoutDamage) {
  std::string dir = test::makeTempDir();
  std::string path = dir + "/keep.ckpt";
  writeFileAtomically(path, frameCheckpoint("old"));
  // A directory where the file should go: rename must fail and leave the old file.
  fs::create_directory(dir + "/blocked.ckpt");
  fs::create_directory(dir + "/blocked.ckpt/inner");
  EXPECT_THROW(writeFileAtomically(dir + "/blocked.ckpt", frameCheckpoint("new")), Error);
  EXPECT_EQ(readCheckpoint(path), "old");
}

}  // namespace
}  // namespace lockstep

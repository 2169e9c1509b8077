// Checkpoints written as a stream (CheckpointDir::save of a TensorArchive):
// the file holds exactly the bytes of the framed serialize() — tensors that are
// not contiguous included — and reads back; the archive's pieces add up to
// serialize(); a failed write leaves no file and names the temporary one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/train/checkpoint.h"
#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TensorArchive sample() {
  TensorArchive archive("sample");
  at::manual_seed(3);
  archive.putTensor("a/big", at::randn({700, 900}));           // 2.5 MB: written straight from memory
  archive.putTensor("a/transposed", at::randn({30, 40}).t());  // not contiguous: copied for the write
  archive.putTensor("b/small", at::arange(5, at::kLong));      // gathered with its neighbours
  archive.putTensor("b/empty", at::empty({0, 3}));
  archive.putInt("c/int", -7);
  archive.putDouble("c/double", 0.25);
  archive.putBool("c/bool", true);
  archive.putString("c/string", std::string(3000, 'x'));
  return archive;
}

TEST(CheckpointStreaming, TheFileIsTheFramedSerializationByteForByte) {
  TensorArchive archive = sample();
  const std::string bytes = archive.serialize();
  EXPECT_EQ(archive.serializedSize(), bytes.size());
  std::string pieces;
  int calls = 0;
  archive.writeTo([&](std::string_view piece) {
    pieces.append(piece);
    ++calls;
  });
  EXPECT_EQ(pieces, bytes);
  EXPECT_GT(calls, 4) << "written in pieces, not as one copy";

  std::string dir = test::makeTempDir();
  CheckpointDir ckpts(dir, 2);
  const std::string streamed = ckpts.save(5, archive);
  CheckpointDir strings(dir + "/strings", 2);
  const std::string whole = strings.save(5, bytes);
  EXPECT_EQ(readBytes(streamed), readBytes(whole));
  EXPECT_EQ(readBytes(streamed), frameCheckpoint(bytes));
  TensorArchive back = TensorArchive::parse(readCheckpoint(streamed), streamed);
  EXPECT_TRUE(at::equal(back.getTensor("a/transposed"), archive.getTensor("a/transposed")));
  EXPECT_EQ(back.getString("c/string"), std::string(3000, 'x'));
  // Rotation as for the other save: the oldest beyond keep_last goes.
  ckpts.save(6, archive);
  ckpts.save(7, archive);
  ASSERT_EQ(ckpts.list().size(), 2u);
  EXPECT_EQ(ckpts.list().front().step, 6);
}

TEST(CheckpointStreaming, AFailedWriteLeavesNothingAndNamesTheFile) {
  std::string dir = test::makeTempDir();
  CheckpointDir ckpts(dir, 5);
  ckpts.save(1, sample());
  // A directory where step 2's file should go: the rename fails after the whole stream was written.
  fs::create_directories(dir + "/step-000000002.ckpt/inner");
  std::string message = test::errorOf([&] { ckpts.save(2, sample()); });
  EXPECT_HAS(message, "step-000000002.ckpt");
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
  }
  EXPECT_NO_THROW(TensorArchive::parse(readCheckpoint(dir + "/step-000000001.ckpt"), "step 1"));
}

}  // namespace
}  // namespace lockstep

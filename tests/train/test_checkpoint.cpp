#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize/output-archive.h>

#include <fmt/format.h>

#include <string>
using namespace std::string_literals;

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "common/posix_io.h"
#include "lockstep/common/checksum.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/data/dataset.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// A checkpoint file written the way CheckpointDir writes one.
void writeFileAtomically(const std::string& path, const std::string& bytes) {
  detail::writeFileAtomically(path, {bytes}, detail::Durability::kMachineCrash);
}

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
    EXPECT_NE(std::string(e.what()).find(path + " is truncated: 500 of 1032 bytes present"), std::string::npos)
        << e.what();
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
  EXPECT_THROW(readCheckpoint(dir), CheckpointError);
  // A length field of 2^62: refused from the file's size, before anything that large is allocated.
  std::string huge = framed;
  huge[23] = 0x40;
  writeAll(path, huge);
  try {
    readCheckpoint(path);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_HAS(std::string(e.what()), path + " is truncated: 1032 of 4611686018427388936 bytes present");
  }
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
  // save() writes header and payload separately: the same bytes as frameCheckpoint.
  EXPECT_EQ(readAll(entries[1].path), frameCheckpoint("s20"));
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
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << entry.path();
  }
}

// ---- TensorArchive: the checkpoint payload ----------------------------------

/// The message of the CheckpointError `fn` throws; fails the test when it throws nothing.
template <typename Fn>
std::string checkpointErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) { return e.what(); }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

/// The bytes of `t` as they lie in memory, row-major.
std::string bytesOf(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

uint64_t bitsOf(double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

TEST(TensorArchive, RoundTripsEveryKindOfValue) {
  at::manual_seed(5);
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"t/float", at::randn({3, 4})},
      {"t/double", at::randn({2, 2, 2}, at::kDouble)},
      {"t/half", at::randn({5}).to(at::kHalf)},
      {"t/bfloat16", at::randn({5}).to(at::kBFloat16)},
      {"t/uint8", at::randint(0, 256, {7}, at::kByte)},
      {"t/int8", at::randint(-128, 128, {7}, at::kChar)},
      {"t/int16", at::randint(-30000, 30000, {3}, at::kShort)},
      {"t/int32", at::randint(-100000, 100000, {3}, at::kInt)},
      {"t/int64", at::tensor({std::numeric_limits<int64_t>::min(), int64_t{0}, std::numeric_limits<int64_t>::max()})},
      {"t/bool", at::randint(0, 2, {6}).to(at::kBool)},
      {"t/scalar", at::scalar_tensor(2.5)},
      {"t/empty", at::empty({0, 3})},
      {"t/transposed", at::arange(12, at::kFloat).reshape({3, 4}).t()},
  };
  const std::vector<double> doubles = {0.1, -0.0, std::numeric_limits<double>::infinity(),
                                       std::numeric_limits<double>::quiet_NaN(),
                                       std::numeric_limits<double>::denorm_min()};
  TensorArchive a("in memory");
  for (const auto& [key, t] : tensors) a.putTensor(key, t);
  a.putInt("i/min", std::numeric_limits<int64_t>::min());
  a.putInt("i/max", std::numeric_limits<int64_t>::max());
  a.putInt("i/minus", -1);
  for (size_t i = 0; i < doubles.size(); ++i) a.putDouble("d/" + std::to_string(i), doubles[i]);
  a.putBool("b/yes", true);
  a.putBool("b/no", false);
  a.putString("s/nul", "a\0b\xff"s);
  a.putString("s/empty", "");
  a.putString("s/utf8", "Fénix 🐾");

  TensorArchive b = TensorArchive::parse(a.serialize(), "copy");
  EXPECT_EQ(b.label(), "copy");
  ASSERT_EQ(b.size(), a.size());
  EXPECT_EQ(b.keys(), a.keys());
  for (const auto& [key, t] : tensors) {
    ASSERT_EQ(b.kind(key), TensorArchive::Kind::kTensor) << key;
    at::Tensor back = b.getTensor(key);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << key;
    EXPECT_EQ(back.sizes().vec(), t.sizes().vec()) << key;
    EXPECT_TRUE(back.is_contiguous()) << key;
    EXPECT_EQ(bytesOf(back), bytesOf(t)) << key;
  }
  EXPECT_EQ(b.getTensor("t/transposed")[0][2].item<float>(), 2 * 4.0f);
  EXPECT_EQ(b.getInt("i/min"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(b.getInt("i/max"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(b.getInt("i/minus"), -1);
  for (size_t i = 0; i < doubles.size(); ++i)
    EXPECT_EQ(bitsOf(b.getDouble("d/" + std::to_string(i))), bitsOf(doubles[i]));
  EXPECT_TRUE(b.getBool("b/yes"));
  EXPECT_FALSE(b.getBool("b/no"));
  EXPECT_EQ(b.getString("s/nul"), "a\0b\xff"s);
  EXPECT_EQ(b.getString("s/empty"), "");
  EXPECT_EQ(b.getString("s/utf8"), "Fénix 🐾");
  EXPECT_EQ(b.keys("s/"), (std::vector<std::string>{"s/empty", "s/nul", "s/utf8"}));
  // An empty archive is valid too.
  EXPECT_EQ(TensorArchive::parse(TensorArchive().serialize(), "empty").size(), 0u);
}

TEST(TensorArchive, TheSameContentGivesTheSameBytes) {
  auto build = [](bool reversed) {
    TensorArchive a;
    std::vector<std::function<void()>> puts = {
        [&] {
          a.putTensor("model/w", at::arange(6, at::kFloat).reshape({2, 3}));
        },
        [&] { a.putInt("meta/step", 7); },
        [&] { a.putDouble("optimizer/lr", 0.25); },
        [&] { a.putString("extra/task", "names"); },
        [&] { a.putBool("optimizer/param0/present", true); },
    };
    if (reversed) std::reverse(puts.begin(), puts.end());
    for (auto& put : puts) put();
    return a;
  };
  TensorArchive forward = build(false);
  std::string bytes = forward.serialize();
  EXPECT_EQ(bytes.substr(0, 16), "LOCKSTEP-TENSORS");
  EXPECT_EQ(build(true).serialize(), bytes);
  EXPECT_EQ(forward.serialize(), bytes);
  EXPECT_EQ(TensorArchive::parse(bytes, "x").serialize(), bytes);
  // put* replaces: still one entry per key.
  forward.putInt("meta/step", 8);
  EXPECT_EQ(forward.size(), 5u);
  EXPECT_EQ(TensorArchive::parse(forward.serialize(), "x").getInt("meta/step"), 8);
  EXPECT_NE(forward.serialize(), bytes);
  EXPECT_THROW(forward.putInt("", 1), Error);
  EXPECT_THROW(forward.putTensor("undefined", at::Tensor()), Error);
  EXPECT_THROW(forward.putTensor("complex", at::zeros({2}, at::kComplexFloat)), Error);
}

TEST(TensorArchive, GettersNameTheMissingOrMistypedKey) {
  TensorArchive a("ckpt/step-000000004.ckpt");
  a.putInt("meta/step", 4);
  EXPECT_EQ(checkpointErrorOf([&] { a.getInt("meta/epoch"); }), "ckpt/step-000000004.ckpt has no entry 'meta/epoch'");
  EXPECT_EQ(checkpointErrorOf([&] { a.getString("meta/step"); }),
            "entry 'meta/step' of ckpt/step-000000004.ckpt is an int64, expected a string");
  EXPECT_EQ(checkpointErrorOf([&] { a.getTensor("meta/step"); }),
            "entry 'meta/step' of ckpt/step-000000004.ckpt is an int64, expected a tensor");
  EXPECT_THROW(a.kind("nope"), CheckpointError);
}

std::string smallArchive() {
  TensorArchive a;
  a.putTensor("w", at::arange(6, at::kFloat).reshape({2, 3}));
  a.putTensor("flags", at::tensor({1, 0, 1}).to(at::kBool));
  a.putInt("step", 12);
  a.putDouble("lr", 0.01);
  a.putBool("present", true);
  a.putString("name", "adam");
  return a.serialize();
}

TEST(TensorArchive, EveryTruncationIsAnErrorNamingTheLabel) {
  const std::string bytes = smallArchive();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string cut = bytes.substr(0, n);  // its own allocation: a sanitizer sees any read past it
    try {
      TensorArchive::parse(cut, "small.ckpt");
      ADD_FAILURE() << "the archive cut to " << n << " of " << bytes.size() << " bytes parsed";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("small.ckpt: malformed tensor archive at byte ", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(checkpointErrorOf([&] { TensorArchive::parse(bytes + "!", "small.ckpt"); }),
            fmt::format("small.ckpt: malformed tensor archive at byte {0} of {1}: 1 unexpected trailing bytes",
                        bytes.size(), bytes.size() + 1));
}

TEST(TensorArchive, FlippedBytesNeverCrash) {
  const std::string bytes = smallArchive();
  int refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xFF}) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      try {
        TensorArchive::parse(damaged, "flipped");  // may parse: data bytes carry no check (the frame's CRC does)
      } catch (const CheckpointError&) { ++refused; } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << " ^ " << int(mask) << " threw something else: " << e.what();
      }
    }
  }
  EXPECT_GT(refused, 0);
}

/// One corruption of a good archive: the bytes to overwrite and what the error must contain.
struct Corruption {
  std::vector<std::pair<size_t, char>> edits;
  std::string expected;
};

void expectCorruptionsNamed(const std::string& good, const std::vector<Corruption>& cases) {
  for (const auto& c : cases) {
    std::string bytes = good;
    for (const auto& [at, value] : c.edits) bytes[at] = value;
    std::string message = checkpointErrorOf([&] { TensorArchive::parse(bytes, "f.ckpt"); });
    EXPECT_HAS(message, c.expected);
  }
}

TEST(TensorArchive, CorruptLengthsCodesAndKeysAreNamed) {
  // One string entry: header 0-31, key length 32-35, key 36, kind 37, length 38-45, "hello" 46-50.
  TensorArchive s;
  s.putString("s", "hello");
  const std::string str = s.serialize();
  ASSERT_EQ(str.size(), 51u);
  expectCorruptionsNamed(
      str, {
               {{{45, '\x7f'}},
                "at byte 46 of 51, in entry 's': a string needs 9151314442816847877 bytes but only 5 remain"},
               {{{38, 6}}, "at byte 46 of 51, in entry 's': a string needs 6 bytes but only 5 remain"},
               {{{34, 1}}, "at byte 32 of 51: entry 0 has a key of 65537 bytes (1 to 4096 allowed)"},
               {{{32, 0}}, "entry 0 has a key of 0 bytes"},
               {{{37, 9}}, "at byte 37 of 51, in entry 's': unknown value kind 9"},
               {{{31, '\x7f'}}, "at byte 24 of 51: it claims 9151314442816847873 entries but only 19 bytes follow"},
               {{{16, 2}}, "format version 2 is not supported"},
               {{{20, 1}}, "unknown flags 0x1"},
               {{{0, 'X'}}, "at byte 0 of 51: it does not start with LOCKSTEP-TENSORS"},
           });

  // One Float[2, 3] tensor: kind 37, dtype 38, ndim 39, sizes 40-55, byte count 56-63, data 64-87.
  TensorArchive t;
  t.putTensor("t", at::zeros({2, 3}));
  const std::string ten = t.serialize();
  ASSERT_EQ(ten.size(), 88u);
  expectCorruptionsNamed(
      ten,
      {
          {{{38, 99}}, "at byte 38 of 88, in entry 't': unknown dtype code 99"},
          {{{39, static_cast<char>(200)}}, "at byte 39 of 88, in entry 't': 200 dimensions (at most 32 are allowed)"},
          {{{47, '\x7f'}}, "at byte 40 of 88, in entry 't': dimension 0 has size"},
          {{{40, 3}},
           "at byte 56 of 88, in entry 't': the tensor's byte count is 24 but a Float tensor of 9 elements "
           "takes 36"},
          {{{40, 3}, {56, 36}}, "at byte 64 of 88, in entry 't': the tensor's data needs 36 bytes but only 24 remain"},
          {{{56, 25}}, "the tensor's byte count is 25"},
      });

  // Bools must be 0 or 1, in a value and in a tensor.
  TensorArchive bools;
  bools.putBool("b", true);
  expectCorruptionsNamed(bools.serialize(), {{{{38, 2}}, "in entry 'b': a bool holds 2"}});
  TensorArchive boolTensor;
  boolTensor.putTensor("b", at::ones({2}, at::kBool));
  const std::string boolBytes = boolTensor.serialize();
  expectCorruptionsNamed(boolBytes,
                         {{{{boolBytes.size() - 1, 7}}, "in entry 'b': a bool tensor holds a byte other than 0 or 1"}});

  // Keys "a" and "b" of the same size; the second renamed to the first.
  TensorArchive two;
  two.putInt("a", 1);
  two.putInt("b", 2);
  const std::string twoBytes = two.serialize();
  ASSERT_EQ(twoBytes[50], 'b');
  expectCorruptionsNamed(twoBytes, {{{{50, 'a'}}, "at byte 46 of 60, in entry 'a': the key appears twice"}});
}

// ---- checkpoints of the Trainer --------------------------------------------

const std::string kObsolete =
    " was written by an older lockstep (torch archive format); it cannot be loaded safely — "
    "retrain or convert";

/// What lockstep 0.x wrote as a checkpoint's payload: a LibTorch (TorchScript zip) archive.
std::string torchArchivePayload() {
  torch::serialize::OutputArchive model;
  model.write("weight", at::ones({2, 3}));
  torch::serialize::OutputArchive archive;
  archive.write("model", model);
  archive.write("meta/step", c10::IValue(int64_t{4}));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

TEST(Checkpoint, OldTorchArchiveCheckpointsAreRefusedUnparsed) {
  std::string payload = torchArchivePayload();
  ASSERT_EQ(payload.substr(0, 4), "PK\x03\x04"s);
  std::string dir = test::makeTempDir();
  // The payload inside a valid current frame: the frame checks out, the payload is refused.
  std::string framed = dir + "/framed.ckpt";
  writeFileAtomically(framed, frameCheckpoint(payload));
  EXPECT_EQ(readCheckpoint(framed), payload);
  torch::nn::Linear model(3, 2);
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0)
        readCheckpointInfo(framed);
      else
        loadModelFromCheckpoint(framed, *model);
      ADD_FAILURE() << "a torch archive was accepted";
    } catch (const ObsoleteCheckpointError& e) { EXPECT_EQ(e.what(), framed + kObsolete); }
  }
  // A file written by the older lockstep itself: the v1 frame is refused before anything is read.
  std::string old = frameCheckpoint(payload);
  old[15] = '1';
  std::string oldPath = dir + "/step-000000004.ckpt";
  writeAll(oldPath, old);
  try {
    readCheckpoint(oldPath);
    ADD_FAILURE() << "a v1 checkpoint was accepted";
  } catch (const ObsoleteCheckpointError& e) { EXPECT_EQ(e.what(), oldPath + kObsolete); }
}

/// A checkpoint as the Trainer writes one, with the model entries `fill` adds.
void writeTrainerCheckpoint(const std::string& path, const std::function<void(TensorArchive&)>& fill) {
  TensorArchive a;
  a.putInt("meta/step", 4);
  a.putInt("meta/epoch", 1);
  a.putInt("meta/batch_in_epoch", 2);
  a.putInt("meta/world_size", 2);
  a.putInt("meta/batch_size", 8);
  a.putString("extra/task", "test");
  fill(a);
  writeFileAtomically(path, frameCheckpoint(a.serialize()));
}

TEST(Checkpoint, ModelLoadChecksEveryNameShapeAndDtype) {
  std::string dir = test::makeTempDir();
  std::string path = dir + "/m.ckpt";
  torch::manual_seed(3);
  torch::nn::Linear source(3, 2);
  writeTrainerCheckpoint(path, [&](TensorArchive& a) {
    a.putTensor("model/weight", source->weight);
    a.putTensor("model/bias", source->bias);
  });
  torch::nn::Linear target(3, 2);
  CheckpointInfo info = loadModelFromCheckpoint(path, *target);
  EXPECT_TRUE(at::equal(target->weight, source->weight));
  EXPECT_TRUE(at::equal(target->bias, source->bias));
  EXPECT_TRUE(target->weight.requires_grad());
  EXPECT_EQ(info.step, 4);
  EXPECT_EQ(info.epoch, 1);
  EXPECT_EQ(info.batchInEpoch, 2);
  EXPECT_EQ(info.worldSize, 2);
  EXPECT_EQ(info.batchSize, 8);
  ASSERT_EQ(info.extras.size(), 1u);
  EXPECT_EQ(info.extras[0], std::make_pair("task"s, "test"s));
  EXPECT_EQ(readCheckpointInfo(path).step, 4);

  // Another shape: named, expected vs found, and the model is left as it was.
  torch::nn::Linear wide(4, 2);
  at::Tensor before = wide->weight.clone();
  EXPECT_EQ(
      checkpointErrorOf([&] { loadModelFromCheckpoint(path, *wide); }),
      "checkpoint " + path + " does not fit this model: 'weight' is float32[2,4] here but float32[2,3] in the file");
  EXPECT_TRUE(at::equal(wide->weight, before));

  // Each refused file holds a usable weight that differs from the loaded one: copying before checking all would show.
  auto expectRefused = [&](const std::function<void(TensorArchive&)>& fill, const std::string& expected) {
    writeTrainerCheckpoint(path, fill);
    at::Tensor weight = target->weight.clone();
    std::string message = checkpointErrorOf([&] { loadModelFromCheckpoint(path, *target); });
    EXPECT_HAS(message, expected);
    EXPECT_TRUE(at::equal(target->weight, weight)) << "a refused checkpoint changed the model";
  };
  expectRefused(
      [&](TensorArchive& a) {
        a.putTensor("model/weight", source->weight * 2);
        a.putTensor("model/bias", source->bias);
        a.putTensor("model/scale", at::ones({1}));
      },
      "does not fit this model: it has 'scale', which this model lacks");
  expectRefused([&](TensorArchive& a) { a.putTensor("model/weight", source->weight * 2); },
                "does not fit this model: it has no 'bias' (float32[2] here)");
  expectRefused(
      [&](TensorArchive& a) {
        a.putTensor("model/weight", source->weight * 2);
        a.putTensor("model/bias", source->bias.to(at::kDouble));
      },
      "'bias' is float32[2] here but float64[2] in the file");
  expectRefused(
      [&](TensorArchive& a) {
        a.putTensor("model/weight", source->weight * 2);
        a.putString("model/bias", "zeros");
      },
      "'bias' is not a tensor but a value of kind string");

  writeTrainerCheckpoint(path, [](TensorArchive& a) { a.putInt("meta/world_size", 0); });
  EXPECT_EQ(checkpointErrorOf([&] { readCheckpointInfo(path); }),
            "checkpoint " + path + ": 'meta/world_size' is 0, expected at least 1");
}

/// Trains an MLP on one worker up to `maxSteps`, checkpointing every 3 steps into `dir`, logging every
/// `logEvery` steps, validating (on the training set) at the end when `validate`.
FitResult trainMlp(const std::string& optimizer, const std::string& dir, int64_t maxSteps, int64_t logEvery = 4,
                   bool validate = false) {
  TrainerOptions o;
  o.optimizer.type = parseOptimizerType(optimizer, "optimizer");
  o.optimizer.lr = 0.05;
  o.optimizer.momentum = 0.9;
  o.optimizer.weightDecay = 0.01;
  o.batchSize = 10;
  o.maxSteps = maxSteps;
  o.lrScaling.rule = LrScalingRule::kNone;
  o.validate = validate;
  o.logEvery = logEvery;
  o.seed = 3;
  o.checkpoint.dir = dir;
  o.checkpoint.every = 3;
  o.checkpoint.keepLast = 5;
  torch::manual_seed(11);
  TensorDataset data(at::randn({60, 12}), at::randn({60, 5}));
  Mlp model(MlpOptions{12, {16}, 5});
  FitResult result;
  test::runRanks(1, [&](int, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    result = Trainer(shared, o).fit(
        model.ptr(),
        [](torch::nn::Module& m, const Batch& b) {
          return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
        },
        data, validate ? &data : nullptr);
  });
  return result;
}

TEST(Checkpoint, ResumeIsBitIdenticalForEveryOptimizer) {
  for (const std::string optimizer : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(optimizer);
    std::string straight = test::makeTempDir();
    std::string resumed = test::makeTempDir();
    // Logged every 4 steps and resumed at 3: the log line of step 4 (in the checkpoint of step 6) covers
    // steps 1-4 only if the resumed run continues the checkpoint's log window.
    EXPECT_EQ(trainMlp(optimizer, straight, 7).steps, 7);
    EXPECT_EQ(trainMlp(optimizer, resumed, 3).steps, 3);
    FitResult second = trainMlp(optimizer, resumed, 7);
    EXPECT_EQ(second.resumedFromStep, 3);
    for (const char* file : {"/step-000000006.ckpt", "/step-000000007.ckpt"}) {
      std::string a = readAll(straight + file);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == readAll(resumed + file)) << file << ": the resumed run diverged";
    }
    // The optimizer state is in the file, by position.
    TensorArchive archive = TensorArchive::parse(readCheckpoint(straight + "/step-000000006.ckpt"), "x");
    EXPECT_EQ(archive.getInt("metrics/window_steps"), 2);  // steps 5 and 6 since the log line of step 4
    EXPECT_EQ(archive.getString("optimizer/type"), optimizer);
    const std::string state = optimizer == "sgd" ? "optimizer/param3/momentum_buffer" : "optimizer/param3/exp_avg_sq";
    EXPECT_EQ(archive.getTensor(state).sizes(), archive.getTensor("model/fc1.bias").sizes());
    if (optimizer != "sgd") EXPECT_EQ(archive.getInt("optimizer/param0/step"), 6);
  }
  // Resuming with another optimizer is refused, naming both.
  std::string dir = test::makeTempDir();
  trainMlp("sgd", dir, 3);
  std::string message = checkpointErrorOf([&] { trainMlp("adam", dir, 6); });
  EXPECT_HAS(message, "step-000000003.ckpt holds sgd optimizer state, but this run uses adam");
}

TEST(Checkpoint, AFinishedRunResumedReportsWhatItEndedWith) {
  std::string dir = test::makeTempDir();
  FitResult first = trainMlp("adam", dir, 6, 4, /*validate=*/true);
  FitResult again = trainMlp("adam", dir, 6, 4, /*validate=*/true);
  EXPECT_EQ(again.resumedFromStep, 6);
  EXPECT_EQ(again.steps, 6);
  EXPECT_GT(first.lastValidationLoss, 0);
  EXPECT_EQ(again.lastTrainLoss, first.lastTrainLoss);
  EXPECT_EQ(again.lastValidationLoss, first.lastValidationLoss);
  EXPECT_EQ(again.lastValidationAccuracy, -1);  // no CorrectFn: never measured
}

TEST(Checkpoint, AutomaticResumeStopsAtAnOldFormatCheckpoint) {
  // Skipping it would start afresh and let rotation delete the new checkpoints beside the old ones.
  std::string dir = test::makeTempDir();
  std::string old = frameCheckpoint(torchArchivePayload());
  old[15] = '1';
  writeAll(dir + "/step-000000009.ckpt", old);
  std::string message = checkpointErrorOf([&] { trainMlp("sgd", dir, 3); });
  EXPECT_HAS(message, dir + "/step-000000009.ckpt" + kObsolete);
  EXPECT_HAS(message, "move the old checkpoints out of " + dir);
  EXPECT_EQ(readAll(dir + "/step-000000009.ckpt"), old);
  EXPECT_FALSE(fs::exists(dir + "/step-000000003.ckpt"));
}

}  // namespace
}  // namespace lockstep

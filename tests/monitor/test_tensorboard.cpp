// The TensorBoard event file, decoded independently: TFRecord framing with
// both masked CRC-32Cs checked per record, then the tensorflow.Event protobuf
// fields parsed back with a small wire-format reader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "lockstep/common/checksum.h"
#include "lockstep/common/error.h"
#include "lockstep/monitor/tensorboard.h"
#include "monitor/run_dir.h"
#include "monitor/tensorboard_records.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <typename T>
T load(const std::string& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

/// The records of a TFRecord file; fails the test on a bad length or CRC.
std::vector<std::string> readRecords(const std::string& file) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_GE(file.size() - at, 12u) << "truncated header at byte " << at;
    if (file.size() - at < 12) break;
    auto length = load<uint64_t>(file, at);
    EXPECT_EQ(load<uint32_t>(file, at + 8), mask(crc32c(file.data() + at, 8))) << "length CRC at byte " << at;
    at += 12;
    EXPECT_GE(file.size() - at, length + 4) << "truncated record at byte " << at;
    if (file.size() - at < length + 4) break;
    std::string data = file.substr(at, length);
    EXPECT_EQ(load<uint32_t>(file, at + length), mask(crc32c(data.data(), data.size()))) << "data CRC at " << at;
    records.push_back(data);
    at += length + 4;
  }
  return records;
}

/// A protobuf wire-format reader: just enough for Event and Summary.
struct Reader {
  const std::string& bytes;
  size_t at = 0;
  bool done() const { return at >= bytes.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; at < bytes.size(); shift += 7) {
      auto byte = static_cast<uint8_t>(bytes[at++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) break;
    }
    return value;
  }
  std::string lengthDelimited() {
    auto n = varint();
    std::string out = bytes.substr(at, n);
    at += n;
    return out;
  }
  template <typename T>
  T fixed() {
    T v = load<T>(bytes, at);
    at += sizeof(T);
    return v;
  }
};

struct DecodedEvent {
  double wallTime = 0;
  int64_t step = 0;
  std::string fileVersion;
  std::string tag;
  std::optional<float> simpleValue;
};

DecodedEvent decodeEvent(const std::string& bytes) {
  DecodedEvent e;
  Reader r{bytes};
  while (!r.done()) {
    auto key = r.varint();
    auto field = key >> 3, wire = key & 7;
    if (field == 1 && wire == 1) {
      e.wallTime = r.fixed<double>();
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      e.fileVersion = r.lengthDelimited();
    } else if (field == 5 && wire == 2) {
      std::string summary = r.lengthDelimited();
      Reader s{summary};
      while (!s.done()) {
        auto skey = s.varint();
        EXPECT_EQ(skey, (1u << 3) | 2u) << "Summary holds only repeated Value (field 1)";
        std::string value = s.lengthDelimited();
        Reader v{value};
        while (!v.done()) {
          auto vkey = v.varint();
          if (vkey == ((1u << 3) | 2u)) {
            e.tag = v.lengthDelimited();
          } else if (vkey == ((2u << 3) | 5u)) {
            e.simpleValue = v.fixed<float>();
          } else {
            ADD_FAILURE() << "unexpected Summary.Value key " << vkey;
            return e;
          }
        }
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << field << " wire type " << wire;
      return e;
    }
  }
  return e;
}

TEST(TensorBoard, Crc32cIsTheCastagnoliPolynomial) {
  // The standard check value of CRC-32C (iSCSI, TFRecord); plain CRC-32 gives 0xCBF43926.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(detail::maskedCrc32c("123456789", 9), mask(0xE3069283u));
}

TEST(TensorBoard, EventFileFramingAndFieldsDecode) {
  std::string dir = test::makeTempDir() + "/tb";
  std::string path;
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.addScalar("train/loss", 10, 2.5, 1700000000.25);
    writer.addScalar("train/lr", 10, 0.001, 1700000000.25);
    writer.addScalar("val/accuracy", 300, 0.875, 1700000100.5);
    writer.flush();
  }
  auto name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;

  auto records = readRecords(test::readFile(path));
  ASSERT_EQ(records.size(), 4u);
  auto first = decodeEvent(records[0]);
  EXPECT_EQ(first.fileVersion, "brain.Event:2");
  EXPECT_GT(first.wallTime, 1.6e9);
  EXPECT_EQ(first.tag, "");

  struct Expected {
    const char* tag;
    int64_t step;
    float value;
    double wallTime;
  };
  std::vector<Expected> expected = {{"train/loss", 10, 2.5f, 1700000000.25},
                                    {"train/lr", 10, 0.001f, 1700000000.25},
                                    {"val/accuracy", 300, 0.875f, 1700000100.5}};
  for (size_t i = 0; i < expected.size(); ++i) {
    auto e = decodeEvent(records[i + 1]);
    EXPECT_EQ(e.tag, expected[i].tag);
    EXPECT_EQ(e.step, expected[i].step);
    ASSERT_TRUE(e.simpleValue.has_value());
    EXPECT_EQ(*e.simpleValue, expected[i].value);
    EXPECT_EQ(e.wallTime, expected[i].wallTime);
    EXPECT_EQ(e.fileVersion, "");
  }
}

TEST(TensorBoard, UnwritableDirectoryNamesThePath) {
  std::string blocker = test::makeTempDir() + "/a-file";
  std::ofstream(blocker) << "x";
  try {
    TensorBoardWriter writer(blocker + "/tb");
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(blocker + "/tb"), std::string::npos) << e.what(); }
}

}  // namespace
}  // namespace lockstep

#include "lockstep/monitor/tensorboard.h"

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "lockstep/common/checksum.h"
#include "monitor/run_files.h"
#include "monitor/tensorboard_records.h"

namespace lockstep {

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

void putVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void putKey(std::string& out, uint32_t field, uint32_t wireType) { putVarint(out, (field << 3) | wireType); }

template <typename T>
void putLittleEndian(std::string& out, T value) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "protobuf and TFRecord fields are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void putBytes(std::string& out, uint32_t field, const std::string& bytes) {
  putKey(out, field, kLengthDelimited);
  putVarint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event fields.
constexpr uint32_t kEventWallTime = 1;     // double
constexpr uint32_t kEventStep = 2;         // int64
constexpr uint32_t kEventFileVersion = 3;  // string
constexpr uint32_t kEventSummary = 5;      // Summary
constexpr uint32_t kSummaryValue = 1;      // repeated Summary.Value
constexpr uint32_t kValueTag = 1;          // string
constexpr uint32_t kValueSimpleValue = 2;  // float

}  // namespace

namespace detail {

uint32_t maskedCrc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encodeFileVersionEvent(double wallTime) {
  std::string event;
  putKey(event, kEventWallTime, kFixed64);
  putLittleEndian(event, wallTime);
  putBytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string encodeScalarEvent(double wallTime, int64_t step, const std::string& tag, float value) {
  std::string summaryValue;
  putBytes(summaryValue, kValueTag, tag);
  putKey(summaryValue, kValueSimpleValue, kFixed32);
  putLittleEndian(summaryValue, value);
  std::string summary;
  putBytes(summary, kSummaryValue, summaryValue);

  std::string event;
  putKey(event, kEventWallTime, kFixed64);
  putLittleEndian(event, wallTime);
  putKey(event, kEventStep, kVarint);
  putVarint(event, static_cast<uint64_t>(step));
  putBytes(event, kEventSummary, summary);
  return event;
}

std::string frameRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  auto length = static_cast<uint64_t>(data.size());
  putLittleEndian(out, length);
  putLittleEndian(out, maskedCrc32c(&length, sizeof(length)));
  out += data;
  putLittleEndian(out, maskedCrc32c(data.data(), data.size()));
  return out;
}

}  // namespace detail

TensorBoardWriter::TensorBoardWriter(const std::string& dir) : file_(std::make_unique<detail::AppendFile>()) {
  detail::createDirectories(dir);
  double now = detail::unixNow();
  auto path = (std::filesystem::path(dir) /
               fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(now), detail::hostName()))
                  .string();
  file_->open(path);
  file_->writeLine(detail::frameRecord(detail::encodeFileVersionEvent(now)));
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::addScalar(const std::string& tag, int64_t step, double value, double wallTime) {
  file_->append(detail::frameRecord(detail::encodeScalarEvent(wallTime, step, tag, static_cast<float>(value))));
}

void TensorBoardWriter::flush() { file_->flush(); }

const std::string& TensorBoardWriter::path() const { return file_->path(); }

}  // namespace lockstep

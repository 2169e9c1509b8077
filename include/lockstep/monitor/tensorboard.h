// lockstep/monitor/tensorboard.h — scalars in TensorBoard's event-file format.
//
// The file is a TFRecord stream (uint64 length, masked CRC-32C of the length,
// the bytes, masked CRC-32C of the bytes; mask = ((crc >> 15) | (crc << 17)) +
// 0xa282ead8) of serialized tensorflow.Event protobufs, encoded by hand
// (src/monitor/tensorboard_records.h):
// first Event{wall_time, file_version "brain.Event:2"}, then one
// Event{wall_time, step, summary{value{tag, simple_value}}} per scalar.
// TensorBoard reads every events.out.tfevents.* file of a directory, so a
// resumed run adds a second file beside the first. Not thread-safe: one
// writer per file, used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace lockstep {

namespace detail {
class AppendFile;
}

class TensorBoardWriter {
 public:
  /// Creates dir/events.out.tfevents.<unix seconds>.<host> (appends if it
  /// exists) and writes the file-version record. Throws Error naming the path.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Buffers one scalar; never throws (a failed write is logged once, at flush).
  void addScalar(const std::string& tag, int64_t step, double value, double wallTime);
  void flush();
  const std::string& path() const;

 private:
  std::unique_ptr<detail::AppendFile> file_;
};

}  // namespace lockstep

// tensorboard_records.h — the bytes of TensorBoard's event files
// (lockstep/monitor/tensorboard.h): tensorflow.Event protobufs encoded by
// hand and framed as TFRecords. Apart from the writer so tests check them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::detail {

/// The masked CRC-32C that TFRecord stores.
uint32_t maskedCrc32c(const void* data, size_t size);

/// One serialized tensorflow.Event holding one scalar.
std::string encodeScalarEvent(double wallTime, int64_t step, const std::string& tag, float value);
/// The serialized first Event of a file: wall_time and file_version "brain.Event:2".
std::string encodeFileVersionEvent(double wallTime);
/// `data` framed as one TFRecord.
std::string frameRecord(const std::string& data);

}  // namespace lockstep::detail

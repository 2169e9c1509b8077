// lockstep/common/checksum.h — CRC-32C (Castagnoli), for checkpoints,
// TensorBoard's record framing (which uses the same polynomial) and the
// checksum of the final parameters a run logs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lockstep {

/// CRC-32C of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace lockstep

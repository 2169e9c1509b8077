// nn/pool_rows.h — the row kernels of lockstep::reluMaxPool2x2 (nn/pooling.h),
// internal to liblockstep.
//
// A row kernel handles one output row of a 2 x 2 max pooling after ReLU: the
// ow windows of input rows r0 and r1 (each 2 * ow elements read). bfloat16
// goes in and out as its 16 bits.
#pragma once

#include <cstdint>

namespace lockstep::detail {

/// Writes each window's ReLU'd maximum to o and the winner's position 0..3 (row
/// order, the first maximum on ties) to k, as if no input were NaN. Returns
/// nonzero when a NaN was read: the row must then be redone by a scan.
int poolRowForward(const float* r0, const float* r1, float* o, uint8_t* k, int64_t ow);
int poolRowForward(const uint16_t* r0, const uint16_t* r1, uint16_t* o, uint8_t* k, int64_t ow);

/// Writes all four inputs of every window: 0 + grad at the winner k (a -0
/// gradient becomes +0, as max_pool2d's backward adds into zeros) unless the
/// window's output is <= 0 (ReLU passes no gradient there; a NaN output
/// passes), zeros elsewhere. For bfloat16 a NaN gradient becomes 0x7FC0, as
/// its conversion from float makes it.
void poolRowBackward(const float* grad, const float* out, const uint8_t* k, float* r0, float* r1, int64_t ow);
void poolRowBackward(const uint16_t* grad, const uint16_t* out, const uint8_t* k, uint16_t* r0, uint16_t* r1,
                     int64_t ow);

}  // namespace lockstep::detail

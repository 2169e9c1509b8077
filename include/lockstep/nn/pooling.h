// lockstep/nn/pooling.h — ReLU followed by 2 x 2 max pooling, in one pass.
//
//   x = lockstep::reluMaxPool2x2(conv->forward(x));   // == at::max_pool2d(at::relu(x), {2, 2})
//
// The same values and the same gradients, bit for bit, as
// at::max_pool2d(at::relu(x), {2, 2}) (kernel 2, stride 2, no padding, floor
// mode; the first maximum of a window in row order wins, NaN propagates; a
// NaN gradient is NaN, its bfloat16 payload 0x7FC0 where LibTorch's
// vectorized conversion writes 0xFFFF),
// since ReLU and max commute: the window's maximum is found once, ReLU is
// applied to it, and backward sends each output's gradient to that one input
// when the output is positive. LibTorch's CPU max_pool2d and the ReLUs around
// it take a large share of the convnet's step (bench/op_profile.sh,
// docs/performance.md); this kernel reads the input once,
// keeps one byte per output for backward (not an int64 index), and skips the
// separate ReLU passes. Its row loops select with masks, not branches (which
// element of a window wins is a coin toss on real data) and on x86-64 take four
// windows at a time in SSE2 registers (src/nn/pool_rows.cpp).
// float32 and bfloat16 (what the convolutions return
// under bf16 autocast) 4-D tensors; anything else (other dtypes, 3-D input)
// falls back to the two LibTorch ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace lockstep {

at::Tensor reluMaxPool2x2(const at::Tensor& input);

}  // namespace lockstep

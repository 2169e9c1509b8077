// lockstep/nn/pooling.h — ReLU followed by 2 x 2 max pooling, in one pass.
//
//   x = lockstep::reluMaxPool2x2(conv->forward(x));   // == at::max_pool2d(at::relu(x), {2, 2})
//
// The same values and the same gradients, bit for bit, as
// at::max_pool2d(at::relu(x), {2, 2}) (kernel 2, stride 2, no padding, floor
// mode; the first maximum of a window in row order wins, NaN propagates),
// since ReLU and max commute: the window's maximum is found once, ReLU is
// applied to it, and backward sends each output's gradient to that one input
// when the output is positive. LibTorch 1.13's CPU max_pool2d on NCHW
// tensors took 18.6 ms of the convnet's forward+backward, its backward 7.8
// and the ReLUs' backward 7.0, against 13.3 for both convolutions' forward
// (batch 128, one thread; bench/op_profile.sh); this kernel reads the input once,
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

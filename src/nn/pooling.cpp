// ReLU + 2 x 2 max pooling as one autograd function (lockstep/nn/pooling.h).
#include "lockstep/nn/pooling.h"

#include "nn/pool_rows.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace lockstep {

namespace {

/// The window (a, b / c, d) in row order: its first maximum, as at::max_pool2d's
/// scan finds it (a later value wins only when greater, a NaN always wins),
/// and the winner's position 0..3.
inline float windowMax(float a, float b, float c, float d, uint8_t* at) {
  if (std::isnan(a) || std::isnan(b) || std::isnan(c) || std::isnan(d)) {  // rare: the scan itself
    const float v[4] = {a, b, c, d};
    float best = -std::numeric_limits<float>::infinity();
    for (uint8_t q = 0; q < 4; ++q) {
      if (v[q] > best || std::isnan(v[q])) {
        best = v[q];
        *at = q;
      }
    }
    return best;
  }
  // Pairwise, earlier on ties: the same winner as the scan when nothing is NaN.
  const bool second = b > a, fourth = d > c;
  const float top = second ? b : a, bottom = fourth ? d : c;
  const bool lower = bottom > top;
  *at = lower ? static_cast<uint8_t>(2 + fourth) : static_cast<uint8_t>(second);
  return lower ? bottom : top;
}

/// The row by at::max_pool2d's scan, for rows holding a NaN.
template <typename T>
void rowForwardScan(const T* row0, const T* row1, T* o, uint8_t* k, int64_t ow) {
  for (int64_t j = 0; j < ow; ++j) {
    const float best = windowMax(static_cast<float>(row0[2 * j]), static_cast<float>(row0[2 * j + 1]),
                                 static_cast<float>(row1[2 * j]), static_cast<float>(row1[2 * j + 1]), &k[j]);
    o[j] = static_cast<T>(best > 0.0f || std::isnan(best) ? best : 0.0f);
  }
}

static_assert(sizeof(at::BFloat16) == sizeof(uint16_t), "bfloat16 is read as its 16 bits");

/// The kernels' element type for T: float, or bfloat16's bits.
template <typename T>
using Raw = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;

template <typename T>
Raw<T>* raw(T* p) {
  return reinterpret_cast<Raw<T>*>(p);
}
template <typename T>
const Raw<T>* raw(const T* p) {
  return reinterpret_cast<const Raw<T>*>(p);
}

/// ReLU of each window's maximum (a NaN stays NaN, as at::relu keeps it);
/// `where` gets the winner's position for backward.
template <typename T>
void poolForward(const T* in, T* out, uint8_t* where, int64_t planes, int64_t h, int64_t w) {
  const int64_t oh = h / 2, ow = w / 2;
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t i = 0; i < oh; ++i) {
        const T* row0 = in + (p * h + 2 * i) * w;
        T* o = out + (p * oh + i) * ow;
        uint8_t* k = where + (p * oh + i) * ow;
        if (detail::poolRowForward(raw(row0), raw(row0 + w), raw(o), k, ow)) rowForwardScan(row0, row0 + w, o, k, ow);
      }
    }
  });
}

/// Each output's gradient to its window's winner, zeros elsewhere (a plane
/// with an odd side is zeroed first for the row or column no window covers;
/// +0.0 is all zero bits in float32 and bfloat16).
template <typename T>
void poolBackward(const T* grad, const T* out, const uint8_t* where, T* gradIn, int64_t planes, int64_t h, int64_t w) {
  const int64_t oh = h / 2, ow = w / 2;
  const bool uncovered = h % 2 != 0 || w % 2 != 0;
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* plane = gradIn + p * h * w;
      if (uncovered) std::memset(static_cast<void*>(plane), 0, sizeof(T) * h * w);
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t o = (p * oh + i) * ow;
        T* row0 = plane + 2 * i * w;
        detail::poolRowBackward(raw(grad + o), raw(out + o), where + o, raw(row0), raw(row0 + w), ow);
      }
    }
  });
}

bool supported(const at::Tensor& x) {
  return x.device().is_cpu() && x.dim() == 4 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
         x.size(2) >= 2 && x.size(3) >= 2 && x.numel() > 0;
}

/// Calls f(T{}) with T the element type: float or at::BFloat16 (what supported() lets through).
template <typename F>
void byElementType(at::ScalarType type, F&& f) {
  if (type == at::kFloat) {
    f(float{});
  } else {
    f(at::BFloat16{});
  }
}

struct ReluMaxPool2x2 : public torch::autograd::Function<ReluMaxPool2x2> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input) {
    const at::Tensor x = input.contiguous();
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    at::Tensor out = at::empty({n, c, h / 2, w / 2}, x.options());
    at::Tensor where = at::empty({n, c, h / 2, w / 2}, x.options().dtype(at::kByte));
    byElementType(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      poolForward(x.data_ptr<T>(), out.data_ptr<T>(), where.data_ptr<uint8_t>(), n * c, h, w);
    });
    ctx->save_for_backward({out, where});
    ctx->saved_data["h"] = h;
    ctx->saved_data["w"] = w;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& out = saved[0];
    const at::Tensor& where = saved[1];
    const int64_t h = ctx->saved_data["h"].toInt(), w = ctx->saved_data["w"].toInt();
    const at::Tensor grad = grads[0].contiguous().to(out.scalar_type());
    at::Tensor gradIn = at::empty({out.size(0), out.size(1), h, w}, out.options());
    const int64_t planes = out.size(0) * out.size(1);
    byElementType(out.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      poolBackward(grad.data_ptr<T>(), out.data_ptr<T>(), where.data_ptr<uint8_t>(), gradIn.data_ptr<T>(), planes, h,
                   w);
    });
    return {gradIn};
  }
};

}  // namespace

at::Tensor reluMaxPool2x2(const at::Tensor& input) {
  if (!supported(input)) return at::max_pool2d(at::relu(input), {2, 2});
  return ReluMaxPool2x2::apply(input);
}

}  // namespace lockstep

#include "lockstep/common/tensor_text.h"

#include <ATen/core/Tensor.h>

namespace lockstep {

std::string dtypeName(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

std::string describeTensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string text = dtypeName(t.scalar_type()) + "[";
  for (int64_t d = 0; d < t.dim(); ++d) text += (d ? "," : "") + std::to_string(t.size(d));
  return text + "]";
}

}  // namespace lockstep

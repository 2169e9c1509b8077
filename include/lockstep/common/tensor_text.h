// lockstep/common/tensor_text.h — how every message names a dtype and a tensor.
//
// dtypes by their PyTorch Python names (float32, bfloat16, int64, ...) and a
// tensor as dtype and shape, "float32[16,24]" ("float32[]" for a scalar,
// "undefined" for an undefined tensor). Errors of every layer use these, so a
// tensor reads the same in a collective's error, a DDP mismatch and a
// checkpoint refusal.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace at {
class Tensor;
}

namespace lockstep {

std::string dtypeName(c10::ScalarType type);
std::string describeTensor(const at::Tensor& t);

}  // namespace lockstep

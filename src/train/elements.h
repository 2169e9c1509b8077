// elements.h — how many elements a list of tensors holds (the start-of-training log lines, a
// parameter server's slice of the flat parameters). Private to train/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lockstep::detail {

inline int64_t elementsOf(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

}  // namespace lockstep::detail

// regression_data.h — the small random regression sets the tests share: the trainer tests' 192
// training and 40 validation samples, and the DDP tests' batches per step; 12 inputs and 5 targets,
// the same on every rank (fixed seeds).
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "lockstep/data/dataset.h"

namespace lockstep::test {

struct RegressionData {
  std::shared_ptr<TensorDataset> train, validation;
};

inline RegressionData makeRegressionData() {
  at::Generator g = at::detail::createCPUGenerator(5);
  return {std::make_shared<TensorDataset>(at::randn({192, 12}, g), at::randn({192, 5}, g)),
          std::make_shared<TensorDataset>(at::randn({40, 12}, g), at::randn({40, 5}, g))};
}

/// `steps` batches of `rows` samples, x [steps, rows, 12] and y [steps, rows, 5], drawn after seeding
/// the global generator with 4242: what the DDP equivalence tests feed (each rank takes its rows).
struct RegressionSteps {
  at::Tensor x, y;
};

inline RegressionSteps makeRegressionSteps(int64_t rows, int64_t steps) {
  at::manual_seed(4242);
  return {at::randn({steps, rows, 12}), at::randn({steps, rows, 5})};
}

}  // namespace lockstep::test

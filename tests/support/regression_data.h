// regression_data.h — the small random regression set the trainer tests share: 192 training and
// 40 validation samples of 12 inputs and 5 targets, the same on every rank (a fixed generator).
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

}  // namespace lockstep::test

// lockstep/models/alexnet.h — "alexnet" (torchvision's layout, for 224x224) and
// "alexnet-cifar" (the same layers scaled to 32x32).
//
// features (5 convs with ReLU, 3 max pools), an adaptive average pool, then
// classifier (Dropout-Linear-ReLU twice, a Linear to numClasses); submodule
// names follow torchvision ("features.0.weight", "classifier.6.bias"). Any
// image side from the smallest its pools take: alexNetFeatureSide() >= 1 for
// "alexnet" (63), 8 for "alexnet-cifar"; makeImageModel() (vision.h) checks it.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/pooling.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/models/image_classifier.h"
#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {

/// The side of torchvision's AlexNet features for a square input of `side`; < 1 when the
/// input is too small for them (the smallest side it takes is 63).
int64_t alexNetFeatureSide(int64_t side);

struct AlexNetLayout {
  const char* type;
  // features: conv1 kernel/stride/padding, conv2 kernel/padding, pooling window/stride
  int64_t k1, s1, p1, k2, p2, poolKernel, poolStride;
  int64_t pooledSide;  ///< adaptive average pool output
  int64_t hidden;      ///< classifier width
};

inline constexpr AlexNetLayout kAlexNet{"alexnet", 11, 4, 2, 5, 2, 3, 2, 6, 4096};
inline constexpr AlexNetLayout kAlexNetCifar{"alexnet-cifar", 3, 1, 1, 3, 1, 2, 2, 4, 1024};

class AlexNetImpl : public ImageClassifierImpl {
 public:
  AlexNetImpl(const ImageModelOptions& o, const AlexNetLayout& l);
  static constexpr int64_t kStages = 8;

  at::Tensor forward(const at::Tensor& images) override;
  std::vector<Layer> layers() override;

 private:
  /// Children [first, end) of `seq`, after `before` (when given).
  static Layer run(std::string name, torch::nn::Sequential seq, size_t first, size_t end, TensorFn before = {});

  ImageModelOptions options_;
  const char* type_;
  torch::nn::Sequential features_{nullptr}, classifier_{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  std::vector<CheckpointStage> stages_;  ///< layers(), with model.checkpoint_segments
};

}  // namespace lockstep

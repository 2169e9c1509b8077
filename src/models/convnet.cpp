// "convnet": the project's small CNN (lockstep/models/convnet.h).
#include "lockstep/models/convnet.h"

#include <ATen/ATen.h>

#include "lockstep/common/env.h"
#include "lockstep/nn/pooling.h"
#include "models/vision_parts.h"

namespace lockstep {
namespace {

namespace nn = torch::nn;

/// LOCKSTEP_PLAIN_POOLING: 1 runs LibTorch's relu + max_pool2d, 0 or unset
/// lockstep's one-pass kernel (the same bits either way); read when a convnet
/// is built, anything else a ConfigError naming the variable.
bool plainPoolingFromEnvironment() {
  return Environment::fromProcess().getInt(env::kPlainPooling, 0, 1).value_or(0) == 1;
}

}  // namespace

ConvNetImpl::ConvNetImpl(const ImageModelOptions& o) : options_(o), plainPooling_(plainPoolingFromEnvironment()) {
  int64_t pooled = o.imageSize / 4;
  conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(o.inChannels, 32, 3).padding(1)));
  conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  fc1_ = register_module("fc1", nn::Linear(64 * pooled * pooled, 128));
  fc2_ = register_module("fc2", nn::Linear(128, o.numClasses));
  if (o.checkpointSegments > 0) stages_ = detail::stagesOf(layers());
}

at::Tensor ConvNetImpl::forward(const at::Tensor& images) {
  if (options_.checkpointSegments > 0) return detail::runStages(stages_, options_.checkpointSegments, images);
  detail::checkImages(images, "convnet", options_.inChannels, options_.imageSize);
  at::Tensor x = reluPool(conv1_->forward(images));
  x = reluPool(conv2_->forward(x));
  x = at::relu(fc1_->forward(x.flatten(1)));
  return fc2_->forward(x);
}

std::vector<Layer> ConvNetImpl::layers() {
  ConvNetImpl* self = this;
  return {{"conv1",
           [self](const at::Tensor& images) {
             detail::checkImages(images, "convnet", self->options_.inChannels, self->options_.imageSize);
             return self->reluPool(self->conv1_->forward(images));
           },
           {conv1_.ptr()}},
          {"conv2", [self](const at::Tensor& x) { return self->reluPool(self->conv2_->forward(x)); }, {conv2_.ptr()}},
          {"fc1", [self](const at::Tensor& x) { return at::relu(self->fc1_->forward(x.flatten(1))); }, {fc1_.ptr()}},
          {"fc2", [self](const at::Tensor& x) { return self->fc2_->forward(x); }, {fc2_.ptr()}}};
}

at::Tensor ConvNetImpl::reluPool(const at::Tensor& x) const {
  return plainPooling_ ? at::max_pool2d(at::relu(x), {2, 2}) : reluMaxPool2x2(x);
}

}  // namespace lockstep

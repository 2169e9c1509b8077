// "alexnet", "alexnet-cifar" (lockstep/models/alexnet.h). The layout follows
// torchvision's, down to submodule names, so that a state dict keys the same way.
#include "lockstep/models/alexnet.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <utility>

#include "models/vision_parts.h"

namespace lockstep {
namespace {

namespace nn = torch::nn;

/// Output side of a conv or pool window; < 1 when the input is too small for it.
int64_t windowOut(int64_t side, int64_t kernel, int64_t stride, int64_t padding) {
  int64_t span = side + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace

int64_t alexNetFeatureSide(int64_t side) {
  side = windowOut(side, 11, 4, 2);  // conv1
  side = windowOut(side, 3, 2, 0);   // pool1
  side = windowOut(side, 3, 2, 0);   // pool2 (conv2..5 keep the size)
  return windowOut(side, 3, 2, 0);   // pool3
}

AlexNetImpl::AlexNetImpl(const ImageModelOptions& o, const AlexNetLayout& l) : options_(o), type_(l.type) {
  auto pool = [&] { return nn::MaxPool2d(nn::MaxPool2dOptions(l.poolKernel).stride(l.poolStride)); };
  auto relu = [] { return nn::ReLU(nn::ReLUOptions(true)); };
  features_ = register_module(
      "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(o.inChannels, 64, l.k1).stride(l.s1).padding(l.p1)),
                                 relu(), pool(), nn::Conv2d(nn::Conv2dOptions(64, 192, l.k2).padding(l.p2)), relu(),
                                 pool(), nn::Conv2d(nn::Conv2dOptions(192, 384, 3).padding(1)), relu(),
                                 nn::Conv2d(nn::Conv2dOptions(384, 256, 3).padding(1)), relu(),
                                 nn::Conv2d(nn::Conv2dOptions(256, 256, 3).padding(1)), relu(), pool()));
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(l.pooledSide)));
  classifier_ = register_module(
      "classifier",
      nn::Sequential(nn::Dropout(0.5), nn::Linear(256 * l.pooledSide * l.pooledSide, l.hidden), relu(),
                     nn::Dropout(0.5), nn::Linear(l.hidden, l.hidden), relu(), nn::Linear(l.hidden, o.numClasses)));
  if (o.checkpointSegments > 0) stages_ = detail::stagesOf(layers());
}

at::Tensor AlexNetImpl::forward(const at::Tensor& images) {
  if (options_.checkpointSegments > 0) return detail::runStages(stages_, options_.checkpointSegments, images);
  detail::checkImages(images, type_, options_.inChannels, /*side=*/0);
  at::Tensor x = avgpool_->forward(features_->forward(images));
  return classifier_->forward(x.flatten(1));
}

Layer AlexNetImpl::run(std::string name, nn::Sequential seq, size_t first, size_t end, TensorFn before) {
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  for (size_t i = first; i < end; ++i) modules.push_back(seq->ptr(i));
  std::shared_ptr<nn::SequentialImpl> impl = seq.ptr();
  return {std::move(name),
          [impl, first, end, before](const at::Tensor& input) {
            at::Tensor x = before ? before(input) : input;
            for (size_t i = first; i < end; ++i) x = (impl->begin() + static_cast<std::ptrdiff_t>(i))->forward(x);
            return x;
          },
          std::move(modules)};
}

std::vector<Layer> AlexNetImpl::layers() {
  AlexNetImpl* self = this;
  auto checked = [self](const at::Tensor& images) {
    detail::checkImages(images, self->type_, self->options_.inChannels, /*side=*/0);
    return images;
  };
  auto pooled = [self](const at::Tensor& x) { return self->avgpool_->forward(x).flatten(1); };
  // features: conv relu pool | conv relu pool | conv relu | conv relu | conv relu pool;
  // classifier: dropout linear relu | dropout linear relu | linear.
  return {run("features.0", features_, 0, 3, checked), run("features.3", features_, 3, 6),
          run("features.6", features_, 6, 8),          run("features.8", features_, 8, 10),
          run("features.10", features_, 10, 13),       run("classifier.1", classifier_, 0, 3, pooled),
          run("classifier.4", classifier_, 3, 6),      run("classifier.6", classifier_, 6, 7)};
}

}  // namespace lockstep

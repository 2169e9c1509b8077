// "mlp": a perceptron over the flattened image (lockstep/models/image_mlp.h).
#include "lockstep/models/image_mlp.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "models/vision_parts.h"

namespace lockstep {

ImageMlpImpl::ImageMlpImpl(const ImageModelOptions& o) : options_(o) {
  int64_t in = o.inChannels * o.imageSize * o.imageSize;
  std::vector<int64_t> outs = o.hiddenSizes;
  outs.push_back(o.numClasses);
  for (size_t i = 0; i < outs.size(); ++i) {
    layers_.push_back(register_module("fc" + std::to_string(i + 1), torch::nn::Linear(in, outs[i])));
    in = outs[i];
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::shared_ptr<torch::nn::LinearImpl> layer = layers_[i].ptr();
    const bool last = i + 1 == layers_.size();
    stages_.push_back({[layer, last](const at::Tensor& x) {
                         at::Tensor y = layer->forward(x);
                         return last ? y : at::relu(y);
                       },
                       layer});
  }
}

at::Tensor ImageMlpImpl::forward(const at::Tensor& images) {
  detail::checkImages(images, "mlp", options_.inChannels, options_.imageSize);
  return detail::runStages(stages_, options_.checkpointSegments, images.flatten(1));
}

std::vector<Layer> ImageMlpImpl::layers() {
  std::vector<Layer> out;
  for (size_t i = 0; i < stages_.size(); ++i) {
    TensorFn fn = stages_[i].fn;
    if (i == 0) {
      ImageModelOptions o = options_;
      fn = [fn, o](const at::Tensor& images) {
        detail::checkImages(images, "mlp", o.inChannels, o.imageSize);
        return fn(images.flatten(1));
      };
    }
    out.push_back({"fc" + std::to_string(i + 1), fn, {stages_[i].module}});
  }
  return out;
}

}  // namespace lockstep

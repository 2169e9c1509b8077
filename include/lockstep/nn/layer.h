// lockstep/nn/layer.h — a model written as a chain of layers, y = ln(...l1(l0(x))): what
// pipeline stages split (pipeline/pipeline.h), what ZeRO-3 gathers one unit at a time
// (ddp/fully_sharded_data_parallel.h) and what a model offers to be split
// (models/image_classifier.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}

namespace lockstep {

/// One link of the chain.
struct Layer {
  std::string name;                                      ///< for messages ("fc1", "layer2.0")
  std::function<at::Tensor(const at::Tensor&)> forward;  ///< the layer's computation
  /// The modules whose parameters and buffers the layer uses (may be empty: a layer without state).
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
};
using PipelineLayer [[deprecated("renamed lockstep::Layer")]] = Layer;

}  // namespace lockstep

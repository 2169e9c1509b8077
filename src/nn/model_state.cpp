// A model's entries in a checkpoint archive (lockstep/nn/model_state.h).
#include "lockstep/nn/model_state.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <set>
#include <string_view>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/common/tensor_text.h"

namespace lockstep {

std::string modelEntryKey(const std::string& name) { return kModelEntryPrefix + name; }

namespace {

constexpr std::string_view kModelPrefix = kModelEntryPrefix;

/// Every defined parameter and buffer of `model`, keyed "model/<name>".
std::vector<std::pair<std::string, at::Tensor>> modelTensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (p.value().defined()) out.emplace_back(modelEntryKey(p.key()), p.value());
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    if (b.value().defined()) out.emplace_back(modelEntryKey(b.key()), b.value());
  }
  return out;
}

}  // namespace

void saveModelState(const torch::nn::Module& model, TensorArchive& archive) {
  for (const auto& [key, tensor] : modelTensors(model)) archive.putTensor(key, tensor);
}

void loadModelState(const TensorArchive& archive, torch::nn::Module& model) {
  auto misfit = [&](const std::string& what) {
    return CheckpointError(fmt::format("checkpoint {} does not fit this model: {}", archive.label(), what));
  };
  auto targets = modelTensors(model);
  std::set<std::string> expected;
  std::vector<at::Tensor> sources;
  for (const auto& [key, target] : targets) {
    std::string name = key.substr(kModelPrefix.size());
    expected.insert(key);
    if (!archive.contains(key)) throw misfit(fmt::format("it has no '{}' ({} here)", name, describeTensor(target)));
    if (archive.kind(key) != TensorArchive::Kind::kTensor) {
      throw misfit(fmt::format("'{}' is not a tensor but a value of kind {}", name, toString(archive.kind(key))));
    }
    at::Tensor source = archive.getTensor(key);
    if (source.scalar_type() != target.scalar_type() || !source.sizes().equals(target.sizes())) {
      throw misfit(
          fmt::format("'{}' is {} here but {} in the file", name, describeTensor(target), describeTensor(source)));
    }
    sources.push_back(std::move(source));
  }
  for (const auto& key : archive.keys(kModelPrefix)) {
    if (!expected.count(key)) {
      throw misfit(fmt::format("it has '{}', which this model lacks", key.substr(kModelPrefix.size())));
    }
  }
  c10::NoGradGuard noGrad;
  for (size_t i = 0; i < targets.size(); ++i) targets[i].second.copy_(sources[i]);
}

}  // namespace lockstep

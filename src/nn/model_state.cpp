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

std::vector<std::pair<std::string, at::Tensor>> modelEntries(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (p.value().defined()) out.emplace_back(modelEntryKey(p.key()), p.value());
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    if (b.value().defined()) out.emplace_back(modelEntryKey(b.key()), b.value());
  }
  return out;
}

void saveModelState(const torch::nn::Module& model, TensorArchive& archive) {
  for (const auto& [key, tensor] : modelEntries(model)) archive.putTensor(key, tensor);
}

void loadModelState(const TensorArchive& archive, torch::nn::Module& model) {
  const size_t prefixLength = std::string_view(kModelEntryPrefix).size();
  auto misfit = [&](const std::string& what) {
    return CheckpointError(fmt::format("checkpoint {} does not fit this model: {}", archive.label(), what));
  };
  auto targets = modelEntries(model);
  std::set<std::string> expected;
  std::vector<at::Tensor> sources;
  for (const auto& [key, target] : targets) {
    std::string name = key.substr(prefixLength);
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
  for (const auto& key : archive.keys(kModelEntryPrefix)) {
    if (!expected.count(key)) {
      throw misfit(fmt::format("it has '{}', which this model lacks", key.substr(prefixLength)));
    }
  }
  c10::NoGradGuard noGrad;
  for (size_t i = 0; i < targets.size(); ++i) targets[i].second.copy_(sources[i]);
}

}  // namespace lockstep

// lockstep/nn/model_state.h — a model's entries in a checkpoint archive: every parameter and
// buffer as "model/<name>". Whatever writes or reads a model's entries goes through these
// functions (the strategies, the parameter servers, `lockstep generate`), so a checkpoint of one
// loads into another.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}

namespace lockstep {

class TensorArchive;

/// The prefix of every model entry; modelEntryKey(name) is the key of the parameter or buffer
/// `name` (as named_parameters() and named_buffers() name it).
inline constexpr char kModelEntryPrefix[] = "model/";
std::string modelEntryKey(const std::string& name);
/// Every defined parameter, then every defined buffer, of `model` under its entry key.
std::vector<std::pair<std::string, at::Tensor>> modelEntries(const torch::nn::Module& model);

/// Puts every defined parameter and buffer of `model` into `archive` as "model/<name>".
void saveModelState(const torch::nn::Module& model, TensorArchive& archive);
/// Checks every tensor (name, dtype, shape; no extra model entry in the archive) before it
/// copies any, and throws CheckpointError naming the archive and the tensor.
void loadModelState(const TensorArchive& archive, torch::nn::Module& model);

}  // namespace lockstep

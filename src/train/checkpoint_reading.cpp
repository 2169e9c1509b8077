// Reading a checkpoint's model and info outside a training run (lockstep generate).
#include <torch/nn/module.h>

#include "lockstep/nn/model_state.h"
#include "lockstep/train/checkpoint.h"
#include "train/training_state.h"

namespace lockstep {

CheckpointInfo readCheckpointInfo(const std::string& path) {
  return detail::readCheckpointMeta(TensorArchive::parse(readCheckpoint(path), path));
}

CheckpointInfo loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model) {
  TensorArchive archive = TensorArchive::parse(readCheckpoint(path), path);
  CheckpointInfo info = detail::readCheckpointMeta(archive);
  loadModelState(archive, model);  // checks every tensor before copying: nothing else to catch
  return info;
}

}  // namespace lockstep

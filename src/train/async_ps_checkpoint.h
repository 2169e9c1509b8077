// async_ps_checkpoint.h — async_ps's checkpoints in the Trainer's own format (private to train/).
//
// A server holds one range of the flattened parameters and the whole optimizer's groups over its
// pieces of them (ps/parameter_server.h). A checkpoint of B updates is written by server 0 from
// every server's range: the model's tensors (model/<name>) and the whole optimizer's entries
// (optimizer/..., assembled by ParameterServer::saveOptimizerState), as a one-worker run of B
// steps would write them — each update is one optimizer step on one worker's batch, taken in the
// order of one sampler over the whole training set — so a DDP run, a sharded run, `lockstep
// generate` and another async_ps run all load it. A server resuming keeps its pieces of any
// Trainer checkpoint's optimizer (ParameterServer::loadOptimizerState).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/ps/parameter_server.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// What a server needs to write its part of a checkpoint.
struct PsCheckpointWriter {
  Communicator* world = nullptr;  ///< the run's communicator (the servers talk over it)
  PsRole role;
  torch::nn::Module* model = nullptr;  ///< shapes and names; server 0 copies the weights into it to save them
  const TrainerOptions* options = nullptr;
  CheckpointDir* dir = nullptr;  ///< server 0's
  int64_t batchesPerEpoch = 0;
  int64_t accumulation = 1;  ///< batches per update

  /// Called by every server at the same number of updates (collective over the servers): the
  /// others send their range and optimizer pieces to server 0, which writes the checkpoint file.
  void write(int64_t updates, ParameterServer& server) const;
};

}  // namespace lockstep::detail

// vision_parts.h — what the image model families share (internal; defined in vision.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/nn/activation_checkpoint.h"
#include "lockstep/nn/layer.h"

namespace lockstep::detail {

/// Images of the rank and channels a model was built for; `side` > 0 also fixes H and W.
void checkImages(const at::Tensor& images, const char* type, int64_t channels, int64_t side);

/// Runs `stages` plainly, or checkpointed in `segments` (> 0).
at::Tensor runStages(const std::vector<CheckpointStage>& stages, int64_t segments, const at::Tensor& x);

/// A model's layers() as checkpoint stages (convnet, alexnet: their forward is
/// that chain). A layer with several modules gets one holder module over them,
/// so the checkpoint saves and restores the buffers of all of them.
std::vector<CheckpointStage> stagesOf(const std::vector<Layer>& layers);

}  // namespace lockstep::detail

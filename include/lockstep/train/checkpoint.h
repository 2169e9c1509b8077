// lockstep/train/checkpoint.h — checkpoint files: framing, atomic writes, rotation.
//
// A checkpoint file is a 32-byte header — magic "LOCKSTEP-CKPT-v2" (16 bytes),
// payload length (u64 little endian), CRC-32C of the payload (u32), 4 zero
// bytes — followed by the payload (a TensorArchive, tensor_archive.h: data
// only, never code). Reading checks all of it and names the file and what is
// wrong (not a checkpoint, truncated at byte N of M, checksum mismatch). A
// "LOCKSTEP-CKPT-v1" file holds a LibTorch archive, whose loading would run
// TorchScript code stored in it: it is refused with ObsoleteCheckpointError.
// Files are written atomically: a temporary file in the same directory, fsync,
// rename, fsync of the directory, so a crash leaves either the old set of
// checkpoints or the new one, never a half-written file under a checkpoint's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/common/tensor_archive.h"  // CheckpointError, ObsoleteCheckpointError
#include "lockstep/nn/model_state.h"         // saveModelState, loadModelState

namespace torch::nn {
class Module;
}

namespace lockstep {

class TensorArchive;

/// Frames a payload as a checkpoint file's content.
std::string frameCheckpoint(const std::string& payload);
/// Reads and verifies a checkpoint file; returns its payload (read once, straight
/// into the returned string). Throws CheckpointError (ObsoleteCheckpointError
/// for a v1 file).
std::string readCheckpoint(const std::string& path);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

/// The checkpoints of a directory, named step-<000000012>.ckpt, oldest first.
class CheckpointDir {
 public:
  CheckpointDir(std::string dir, int keepLast);
  /// Writes step's checkpoint (the frame header, then `payload` as it is: no
  /// framed copy) and deletes all but the newest keepLast. Returns its path.
  std::string save(int64_t step, const std::string& payload);
  /// The same for `archive`'s bytes, streamed into the file as they are produced
  /// (TensorArchive::writeTo): no serialized copy of the checkpoint is ever held.
  std::string save(int64_t step, const TensorArchive& archive);
  std::vector<CheckpointEntry> list() const;
  const std::string& dir() const { return dir_; }
  std::string pathFor(int64_t step) const;

 private:
  void prune() const;
  std::string dir_;
  int keepLast_;
};

// The model's entries of a checkpoint, saveModelState and loadModelState, are in
// lockstep/nn/model_state.h (included above), below every strategy that writes them.

/// What a checkpoint written by the Trainer holds besides tensors.
struct CheckpointInfo {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batchInEpoch = 0;  ///< micro-batches of `epoch` already consumed
  int64_t worldSize = 0;
  int64_t batchSize = 0;
  std::vector<std::pair<std::string, std::string>> extras;
};

/// Loads a Trainer checkpoint's model weights into `model` and returns its info
/// (lockstep generate uses it). Every parameter and buffer of `model` must be
/// in the file with the same dtype and shape, and the file must hold no other
/// model tensor; otherwise `model` is left unchanged. Never runs code from the
/// file (docs/training.md, "What loading verifies"). Throws CheckpointError
/// naming the file and, where one is at fault, the tensor.
CheckpointInfo loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model);
/// Reads only the info of a checkpoint. Throws CheckpointError.
CheckpointInfo readCheckpointInfo(const std::string& path);

}  // namespace lockstep

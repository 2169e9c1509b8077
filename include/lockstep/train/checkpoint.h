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

#include "lockstep/common/error.h"

namespace lockstep {

class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint in a format this lockstep refuses to read (a LibTorch archive
/// written by an older lockstep). Unlike a damaged file it is not skipped by
/// automatic resume: the user has to decide what to do with it.
class ObsoleteCheckpointError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
  /// "<path> was written by an older lockstep (torch archive format); …": the
  /// one message for an old frame and for a LibTorch payload in a current one.
  static ObsoleteCheckpointError about(const std::string& path);
};

/// Writes `bytes` to `path` atomically (see above). Throws lockstep::Error naming the path.
void writeFileAtomically(const std::string& path, const std::string& bytes);

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
  std::vector<CheckpointEntry> list() const;
  const std::string& dir() const { return dir_; }
  std::string pathFor(int64_t step) const;

 private:
  std::string dir_;
  int keepLast_;
};

}  // namespace lockstep

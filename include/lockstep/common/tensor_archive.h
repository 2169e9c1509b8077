// lockstep/common/tensor_archive.h — a flat, code-free container of named values
// (the payload of a checkpoint).
//
// A TensorArchive maps keys (non-empty UTF-8 byte strings, at most 4096 bytes)
// to values of five kinds: a tensor (dtype, shape, contiguous CPU bytes), an
// int64, a double, a bool or a string. It is data only: reading one never
// compiles, looks up or runs anything named in the file — dtypes are stored as
// lockstep's own fixed codes, not names — which is why checkpoints use it and
// not LibTorch's archives (TorchScript zips whose loading runs code stored in
// the file).
//
// Bytes (all integers little endian; payload offsets below start at 0):
//   magic "LOCKSTEP-TENSORS" (16) | version u32 = 1 | flags u32 = 0 | count u64
//   then `count` entries, in increasing key order (bytewise):
//   key length u32 | key | kind u8 | value
//     kind 1 tensor: dtype code u8 | ndim u8 (<= 32) | ndim x size u64
//                    | byte count u64 (= numel x element size) | bytes (row-major)
//     kind 2 int64:  8 bytes        kind 3 double: IEEE-754 bits, 8 bytes
//     kind 4 bool:   1 byte, 0 or 1 kind 5 string: length u64 | bytes
// serialize() is deterministic: the same keys and values give the same bytes.
//
// parse() checks every length against the bytes that remain before reading,
// and refuses unknown magic, versions, kinds and dtype codes, more than 32
// dimensions or a dimension above 2^48, byte counts that do not match the
// shape, bool bytes other than 0/1, duplicate keys and trailing bytes. Every
// failure throws CheckpointError naming the archive's label (the file), the
// byte offset and, once known, the key. Getters throw CheckpointError naming
// the key when it is missing or holds another kind.
//
// Not thread-safe; one archive per thread. put* of a tensor keeps a reference
// (no copy): serialize() writes the tensor's contents as they are then.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/common/error.h"

namespace at {
class Tensor;
}
namespace c10 {
enum class ScalarType : int8_t;
}

namespace lockstep {

/// A stored training state (a checkpoint, an archive in it) that cannot be used.
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

class TensorArchive {
 public:
  enum class Kind : uint8_t { kTensor = 1, kInt = 2, kDouble = 3, kBool = 4, kString = 5 };

  /// `label` names the archive in error messages (usually the checkpoint's path).
  explicit TensorArchive(std::string label = "tensor archive");
  ~TensorArchive();
  TensorArchive(TensorArchive&&) noexcept;
  TensorArchive& operator=(TensorArchive&&) noexcept;
  TensorArchive(const TensorArchive&) = delete;
  TensorArchive& operator=(const TensorArchive&) = delete;

  /// Each put* adds or replaces `key`. Tensors must be defined, dense and of a
  /// supported dtype (float32/64, float16, bfloat16, int8/16/32/64, uint8,
  /// bool); other devices are copied to the CPU at serialize(). Throws Error.
  void putTensor(const std::string& key, const at::Tensor& value);
  void putInt(const std::string& key, int64_t value);
  void putDouble(const std::string& key, double value);
  void putBool(const std::string& key, bool value);
  void putString(const std::string& key, std::string value);
  /// A tensor entry of `dtype` and `sizes` whose value `produce` returns only when the archive is
  /// written (writeTo, serialize), once per write, entries in key order: a checkpoint assembled
  /// from other ranks' pieces one tensor at a time. Its result must have that dtype and shape
  /// (Error otherwise); getTensor on the entry throws Error.
  void putTensorSource(const std::string& key, c10::ScalarType dtype, std::vector<int64_t> sizes,
                       std::function<at::Tensor()> produce);

  bool contains(const std::string& key) const;
  /// The kind of `key`; throws CheckpointError when it is missing.
  Kind kind(const std::string& key) const;
  /// The value of `key`; throws CheckpointError naming the key when it is
  /// missing or of another kind. getTensor returns the archive's tensor (no copy).
  at::Tensor getTensor(const std::string& key) const;
  int64_t getInt(const std::string& key) const;
  double getDouble(const std::string& key) const;
  bool getBool(const std::string& key) const;
  const std::string& getString(const std::string& key) const;

  /// Keys starting with `prefix`, in increasing order.
  std::vector<std::string> keys(std::string_view prefix = {}) const;
  size_t size() const;
  const std::string& label() const;

  /// The archive as bytes (format above).
  std::string serialize() const;
  /// The same bytes handed to `sink` piece by piece (entry headers, then each tensor's bytes straight
  /// from its memory: a copy only of a tensor that is not contiguous on the CPU), so a checkpoint
  /// can be written without holding a second copy of it.
  void writeTo(const std::function<void(std::string_view)>& sink) const;
  /// The number of bytes serialize() returns.
  size_t serializedSize() const;
  /// Parses bytes written by serialize(). Throws CheckpointError (see above);
  /// a LibTorch zip archive is refused as written by an older lockstep.
  static TensorArchive parse(std::string_view bytes, std::string label);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

const char* toString(TensorArchive::Kind kind);

}  // namespace lockstep

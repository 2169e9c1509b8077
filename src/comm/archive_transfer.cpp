// archive_transfer.cpp — lockstep/comm/archive_transfer.h.
#include "lockstep/comm/archive_transfer.h"

#include <ATen/ATen.h>

namespace lockstep {
namespace {

// send/recv tags: the archive's length, then its bytes.
constexpr int kLengthTag = 7101;
constexpr int kBytesTag = 7102;

}  // namespace

void sendArchive(Communicator& comm, const TensorArchive& archive, int dst) {
  std::string bytes = archive.serialize();
  at::Tensor length = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  at::Tensor payload = at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte);
  comm.send(length, dst, kLengthTag)->wait();
  comm.send(payload, dst, kBytesTag)->wait();
}

TensorArchive receiveArchive(Communicator& comm, int src, std::string label) {
  at::Tensor length = at::empty({1}, at::kLong);
  comm.recv(length, src, kLengthTag)->wait();
  at::Tensor payload = at::empty({length.item<int64_t>()}, at::kByte);
  comm.recv(payload, src, kBytesTag)->wait();
  return TensorArchive::parse(std::string_view(reinterpret_cast<const char*>(payload.data_ptr<uint8_t>()),
                                               static_cast<size_t>(payload.numel())),
                              std::move(label));
}

void copyArchiveEntry(const TensorArchive& from, const std::string& key, TensorArchive& to, const std::string& toKey) {
  const std::string& target = toKey.empty() ? key : toKey;
  switch (from.kind(key)) {
    case TensorArchive::Kind::kTensor: to.putTensor(target, from.getTensor(key)); break;
    case TensorArchive::Kind::kInt: to.putInt(target, from.getInt(key)); break;
    case TensorArchive::Kind::kDouble: to.putDouble(target, from.getDouble(key)); break;
    case TensorArchive::Kind::kBool: to.putBool(target, from.getBool(key)); break;
    case TensorArchive::Kind::kString: to.putString(target, from.getString(key)); break;
  }
}

}  // namespace lockstep

// archive_transfer.cpp — lockstep/comm/archive_transfer.h.
#include "lockstep/comm/archive_transfer.h"

#include <ATen/ATen.h>

#include "lockstep/common/error.h"

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

TensorArchive broadcastArchive(Communicator& comm, const TensorArchive* archive, int root, std::string label) {
  const bool isRoot = comm.rank() == root;
  LOCKSTEP_CHECK(!isRoot || archive != nullptr, "broadcastArchive: the root, rank ", root, ", has no archive");
  std::string bytes = isRoot ? archive->serialize() : std::string();
  std::vector<at::Tensor> length{at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong)};
  comm.broadcast(length, root)->wait();
  bytes.resize(static_cast<size_t>(length[0].item<int64_t>()));
  std::vector<at::Tensor> payload{at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte)};
  comm.broadcast(payload, root)->wait();
  return TensorArchive::parse(bytes, std::move(label));
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

TensorArchive skeletonOf(const TensorArchive& archive) {
  TensorArchive out(archive.label());
  for (const auto& key : archive.keys()) {
    if (archive.kind(key) == TensorArchive::Kind::kTensor) {
      out.putTensor(key, at::empty({0}, at::TensorOptions().dtype(archive.getTensor(key).scalar_type())));
    } else {
      copyArchiveEntry(archive, key, out);
    }
  }
  return out;
}

void putAssembledTensor(TensorArchive& archive, const std::string& key, AssembledTensor whole,
                        std::shared_ptr<Communicator> comm, int tag) {
  int64_t covered = 0, numel = 1;
  for (const auto& part : whole.parts) covered += part.length;
  for (int64_t s : whole.sizes) numel *= s;
  LOCKSTEP_ASSERT(covered == numel, "checkpoint entry '", key, "' is assembled from ", covered, " of ", numel,
                  " elements");
  auto sizes = whole.sizes;
  const auto dtype = whole.dtype;
  archive.putTensorSource(key, dtype, std::move(sizes), [comm = std::move(comm), whole = std::move(whole), tag]() {
    at::Tensor full = at::empty(whole.sizes, at::TensorOptions().dtype(whole.dtype));
    at::Tensor flat = full.view({-1});
    for (const auto& part : whole.parts) {
      at::Tensor slice = flat.narrow(0, part.offset, part.length);
      if (part.rank == comm->rank()) {
        slice.copy_(part.local.reshape({-1}));
      } else {
        comm->recv(slice, part.rank, tag)->wait();
      }
    }
    return full;
  });
}

}  // namespace lockstep

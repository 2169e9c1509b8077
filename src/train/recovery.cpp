// A new generation takes up the furthest state of the lost one (lockstep/train/recovery.h).
#include "lockstep/train/recovery.h"

#include <ATen/ATen.h>

#include <optional>
#include <utility>
#include <vector>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_archive.h"

namespace lockstep {
namespace {

/// The maximum of `value` over `comm`'s ranks.
int64_t maxOver(Communicator& comm, int64_t value) {
  std::vector<at::Tensor> t{at::tensor({value}, at::kLong)};
  comm.allreduce(t, ReduceOp::kMax)->wait();
  return t[0].item<int64_t>();
}

}  // namespace

Recovery recoverFromFurthest(std::unique_ptr<Strategy> lost, int64_t completedStep, std::shared_ptr<Communicator> next,
                             const StrategyBuilder& build) {
  LOCKSTEP_CHECK(next != nullptr, "recoverFromFurthest: no communicator for the new generation");
  Communicator& comm = *next;
  // One maximum finds both the furthest step and its first member: step x size + (size - 1 - rank)
  // orders by step, then by lower rank; a member with nothing to give counts as step -1.
  const int64_t size = comm.size();
  const int64_t mine = lost ? completedStep : -1;
  const int64_t furthest = maxOver(comm, mine * size + (size - 1 - comm.rank()));
  LOCKSTEP_CHECK(furthest >= 0, "recoverFromFurthest: none of the ", size,
                 " members of the new generation brings a strategy to take up");
  Recovery r;
  r.step = furthest / size;
  r.source = static_cast<int>(size - 1 - furthest % size);
  std::optional<TensorArchive> state;
  if (comm.rank() == r.source) {
    state.emplace("recovered state");
    lost->saveState(&*state);
  }
  TensorArchive taken = broadcastArchive(comm, state ? &*state : nullptr, r.source, "recovered state");
  lost.reset();
  r.strategy = build(std::move(next));
  r.strategy->loadState(taken, /*report=*/false);
  r.strategy->start();
  return r;
}

}  // namespace lockstep

// lockstep/comm/nccl.h — the Communicator over NCCL, for ranks that each have their own GPU.
//
// Operations go to LibTorch's c10d ProcessGroupNCCL on this rank's GPU and run
// on NCCL's streams, after the work already queued on the caller's stream.
// The Communicator contract holds (communicator.h) with these differences:
// - Tensors on this rank's GPU are used in place; any other tensor (CPU, another
//   device) goes through a buffer on the GPU, copied in before and back in wait().
// - wait() returns once the GPU finished the operation (the host polls it), and
//   throws CommError naming the operation and rank on failure. At the deadline
//   the communicator's NCCL communicators are aborted (nothing stays hung on
//   the GPU) and wait() throws kTimeout; every later operation fails kAborted.
// - waitOnStream() makes the caller's current CUDA stream wait for NCCL's and
//   returns at once; a thread of the communicator keeps the deadline (abort,
//   then the next operation fails kAborted naming the late one).
// - send/recv: NCCL matches messages between two ranks in the order they were
//   posted; the tag is not used for matching.
// - NCCL creates its own communicator at the first operation of a group
//   (the ranks exchange its identifier through the store).
#pragma once

#include <chrono>
#include <memory>

#include "lockstep/comm/communicator.h"

namespace lockstep {

struct NcclOptions {
  int rank = 0;
  int worldSize = 1;
  /// This rank's GPU: cuda:deviceIndex. No two ranks of a host may share one (NCCL refuses it).
  int deviceIndex = 0;
  /// Default timeout of every operation; NCCL's own watchdog is set past it, so lockstep's fires first.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

/// True when this build of lockstep has the NCCL backend (LibTorch with c10d's ProcessGroupNCCL).
bool ncclBackendBuilt();

/// A Communicator over NCCL meeting through `store`. Throws ConfigError when the backend was not
/// built or cuda:deviceIndex is not visible to this process.
std::shared_ptr<Communicator> makeNcclCommunicator(const Store& store, const NcclOptions& options);

}  // namespace lockstep

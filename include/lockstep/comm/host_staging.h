// lockstep/comm/host_staging.h — device tensors over a backend that moves host memory.
//
// Gloo and MPI take CPU tensors. This Communicator forwards every operation to
// another one; tensors it should stage (by default every tensor not on the
// CPU: CUDA) are copied into host buffers (page-locked for CUDA) before the
// inner operation is submitted, and wait() copies the results back into the
// caller's tensors after the inner operation finished. CPU tensors pass
// through untouched, so a CPU-only job pays one device check per tensor.
// This is how several ranks sharing one GPU (NCCL refuses that), or a job on
// Gloo or MPI, run with CUDA tensors. The copy in is synchronous (the host
// waits for the kernels that produced the tensor); the copy back happens in
// wait(), on the waiting thread. Errors and timeouts are the inner
// operation's.
#pragma once

#include <functional>
#include <memory>

#include "lockstep/comm/communicator.h"

namespace lockstep {

/// Which tensors go through host buffers; default: those not on the CPU.
using StagePredicate = std::function<bool(const at::Tensor&)>;

/// Wraps `inner`. Groups split from the result stage alike.
std::shared_ptr<Communicator> withHostStaging(std::shared_ptr<Communicator> inner, StagePredicate stage = nullptr);

}  // namespace lockstep

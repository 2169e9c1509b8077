// lockstep/rendezvous/placement.h — where a worker computes and how its tensors travel,
// resolved in one place for init() and the Trainer.
//
//   Placement p = resolvePlacement(DeviceChoice::kAuto, comm->backend(), world.localRank);
//   model->to(p.device);
//   if (p.stagesThroughHost()) comm = withHostStaging(comm);   // CUDA tensors over gloo or mpi
//
//   nccl        cuda:(local rank): NCCL moves the memory of the worker's own GPU; the
//               device choice cpu is a ConfigError naming `what`
//   gloo, mpi   pickDevice(choice, local rank) (common/device.h); CUDA tensors reach these
//               backends through pinned host buffers (comm/host_staging.h)
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/device.h"

namespace lockstep {

struct Placement {
  /// Where the model, its batches and its gradients live.
  c10::Device device{c10::kCPU};
  /// The library that carries the gradients.
  Backend backend = Backend::kGloo;
  /// True when CUDA tensors travel through host memory (a GPU over gloo or mpi).
  bool stagesThroughHost() const { return device.is_cuda() && backend != Backend::kNccl; }
};

/// The placement of the worker of `localRank` that asked for `choice` over `backend`.
/// ConfigError naming `what` when `choice` cannot work (cuda without a visible GPU, cpu over nccl).
Placement resolvePlacement(DeviceChoice choice, Backend backend, int localRank, const std::string& what = "device");

}  // namespace lockstep

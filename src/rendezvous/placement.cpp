#include "lockstep/rendezvous/placement.h"

#include <fmt/format.h>

#include "lockstep/common/error.h"

namespace lockstep {

Placement resolvePlacement(DeviceChoice choice, Backend backend, int localRank, const std::string& what) {
  if (backend != Backend::kNccl) return {pickDevice(choice, localRank, what), backend};
  if (choice == DeviceChoice::kCpu) {
    throw ConfigError(
        fmt::format("{} cpu over the nccl backend: NCCL moves the memory of the worker's GPU; train on the GPU "
                    "({} auto or cuda) or choose the gloo backend",
                    what, what));
  }
  return {c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank)), backend};
}

}  // namespace lockstep

// staging.h — host tensors through device buffers, for a backend that takes only the memory
// of one device (NCCL: this rank's GPU). The mirror of withHostStaging (host_staging.h), and
// the same wrapper. Private to comm/.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "lockstep/comm/communicator.h"

namespace lockstep::detail {

/// Wraps `inner`: every tensor not on `device` travels through a buffer on it, copied in before
/// the inner operation and back in wait(). Groups split from the result stage alike.
std::shared_ptr<Communicator> withDeviceStaging(std::shared_ptr<Communicator> inner, c10::Device device);

}  // namespace lockstep::detail

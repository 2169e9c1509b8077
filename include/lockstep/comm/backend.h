// lockstep/comm/backend.h — the libraries that carry a communicator's tensors.
//
//   comm->backend() == Backend::kNccl      // Communicator::backend(), communicator.h
//   parseBackend("mpi", "--backend")       // Backend::kMpi; ConfigError naming the flag otherwise
#pragma once

#include <string>

namespace lockstep {

enum class Backend { kGloo, kMpi, kNccl };
const char* toString(Backend backend);
/// gloo, mpi or nccl (any case); ConfigError naming `what` and the allowed values otherwise.
Backend parseBackend(const std::string& text, const std::string& what);

}  // namespace lockstep

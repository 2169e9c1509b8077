// forwarding.h — the base of the Communicator wrappers (stall inspector, host staging):
// what a wrapper answers for the communicator it wraps. Private to comm/.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep::detail {

/// Answers rank, size, backend, timeout, global ranks and group name from `inner`; the
/// operations are the wrapper's.
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backendName() const override { return inner_->backendName(); }
  std::chrono::milliseconds defaultTimeout() const override { return inner_->defaultTimeout(); }
  std::vector<int> globalRanks() const override { return inner_->globalRanks(); }
  std::string groupName() const override { return inner_->groupName(); }

 protected:
  std::shared_ptr<Communicator> inner_;
};

}  // namespace lockstep::detail

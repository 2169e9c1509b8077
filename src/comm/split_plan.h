// split_plan.h — who is in which group when a communicator is split
// (Communicator::split): every rank's (color, key) gathered over the parent,
// the members of this rank's color ordered by key, then by parent rank.
// Shared by the backends that build groups themselves (Gloo). Internal to src/comm.
#pragma once

#include <string>
#include <vector>

namespace lockstep {
class Communicator;
}

namespace lockstep::detail {

struct SplitPlan {
  std::vector<int> members;  ///< parent ranks of this rank's group, in group rank order; empty for a negative color
  int rank = -1;             ///< this rank's rank in its group
};

/// Collective over `parent` (one allgather). A negative color means "in no group".
SplitPlan planSplit(Communicator& parent, int color, int key);

/// "color<c>" when `name` is empty.
std::string groupName(const std::string& name, int color);

}  // namespace lockstep::detail

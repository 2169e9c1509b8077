#include "comm/split_plan.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"

namespace lockstep {

std::shared_ptr<Communicator> Communicator::split(int, int, const std::string&) {
  throw Error(fmt::format("split: this {} communicator cannot be split into groups", backendName()));
}

std::vector<int> Communicator::globalRanks() const {
  std::vector<int> ranks(static_cast<size_t>(size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

}  // namespace lockstep

namespace lockstep::detail {

SplitPlan planSplit(Communicator& parent, int color, int key) {
  const int world = parent.size();
  at::Tensor mine = at::tensor({static_cast<int64_t>(color), static_cast<int64_t>(key)}, at::kLong);
  at::Tensor all = at::empty({world * 2}, at::kLong);
  parent.allgather(mine, all)->wait();
  SplitPlan plan;
  if (color < 0) return plan;
  const int64_t* v = all.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    if (v[2 * r] == color) plan.members.push_back(r);
  }
  std::stable_sort(plan.members.begin(), plan.members.end(), [&](int a, int b) { return v[2 * a + 1] < v[2 * b + 1]; });
  plan.rank =
      static_cast<int>(std::find(plan.members.begin(), plan.members.end(), parent.rank()) - plan.members.begin());
  return plan;
}

std::string groupName(const std::string& name, int color) {
  return name.empty() ? fmt::format("color{}", color) : name;
}

}  // namespace lockstep::detail

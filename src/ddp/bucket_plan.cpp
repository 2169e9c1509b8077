// bucket_plan.cpp — src/ddp/bucket_plan.h.
#include "ddp/bucket_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace lockstep::detail {

std::vector<std::vector<size_t>> planBuckets(const std::vector<int64_t>& numels, const DdpOptions& options) {
  const int64_t capBytes = std::max<int64_t>(4, static_cast<int64_t>(options.bucketCapMb * 1024 * 1024));
  const int64_t firstCapBytes =
      std::min(capBytes, std::max<int64_t>(4, static_cast<int64_t>(options.firstBucketCapMb * 1024 * 1024)));
  std::vector<std::vector<size_t>> buckets;
  int64_t bucketBytes = 0;
  for (size_t k = numels.size(); k-- > 0;) {
    int64_t bytes = numels[k] * 4;
    int64_t cap = buckets.size() == 1 ? firstCapBytes : capBytes;
    if (buckets.empty() || (bucketBytes > 0 && bucketBytes + bytes > cap)) {
      buckets.emplace_back();
      bucketBytes = 0;
    }
    buckets.back().push_back(k);
    bucketBytes += bytes;
  }
  return buckets;
}

std::string missingGradientsError(const std::vector<std::string>& names, const std::vector<bool>& arrived, int rank,
                                  bool anyArrived) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!arrived[i]) missing.push_back(names[i]);
  }
  if (missing.empty()) return {};
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + missing[i];
  if (missing.size() > 8) list += fmt::format(" and {} more", missing.size() - 8);
  return fmt::format("{} parameter(s) received no gradient in this step on rank {}: {}. {}", missing.size(), rank, list,
                     anyArrived ? "If some parameters are legitimately unused, set DdpOptions::findUnusedParameters "
                                  "(ddp.find_unused_parameters in configs)."
                                : "Call finishGradientSync() once after each backward.");
}

std::string arrivedTwiceError(const std::string& name) {
  return fmt::format(
      "the gradient of '{}' arrived twice without finishGradientSync() in between; call finishGradientSync() after "
      "every synchronised backward, or use noSync() to accumulate",
      name);
}

}  // namespace lockstep::detail

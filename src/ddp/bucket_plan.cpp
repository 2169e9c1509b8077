// bucket_plan.cpp — src/ddp/bucket_plan.h.
#include "ddp/bucket_plan.h"

#include <algorithm>

namespace lockstep::detail {

std::vector<std::vector<size_t>> planBuckets(const std::vector<int64_t>& numels, const SyncOptions& options) {
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

}  // namespace lockstep::detail

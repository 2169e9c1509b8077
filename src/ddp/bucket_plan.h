// bucket_plan.h — which parameters share a gradient bucket (DistributedDataParallel, ZeRO-2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lockstep/ddp/distributed_data_parallel.h"

namespace lockstep::detail {

/// Parameter indices of each bucket, in launch order: parameters in reverse
/// registration order (backward produces the last layers' gradients first),
/// a bucket closed when the next parameter would take it over
/// options.bucketCapMb (the first bucket over min(firstBucketCapMb, bucketCapMb));
/// a parameter larger than the cap gets a bucket of its own.
std::vector<std::vector<size_t>> planBuckets(const std::vector<int64_t>& numels, const SyncOptions& options);

}  // namespace lockstep::detail

// bucket_plan.h — which parameters share a gradient bucket, and the errors of
// a step's gradients: what DistributedDataParallel and ZeRO-2 share.
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
std::vector<std::vector<size_t>> planBuckets(const std::vector<int64_t>& numels, const DdpOptions& options);

/// The error for the parameters that got no gradient in a synchronised step
/// (names[i] for each i not arrived); empty when every one arrived.
std::string missingGradientsError(const std::vector<std::string>& names, const std::vector<bool>& arrived, int rank,
                                  bool anyArrived);
/// The error for a gradient that arrived twice without finishGradientSync() in between.
std::string arrivedTwiceError(const std::string& name);

}  // namespace lockstep::detail

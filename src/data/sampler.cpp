#include "lockstep/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "lockstep/common/error.h"

namespace lockstep {
namespace {

/// A uniform integer in [0, bound) from `gen`, without modulo bias. Written out
/// because std::uniform_int_distribution differs between standard libraries.
uint64_t uniformBelow(std::mt19937_64& gen, uint64_t bound) {
  // Values below 2^64 mod bound would make the low residues more likely.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

std::vector<int64_t> globalOrder(int64_t datasetSize, bool shuffle, uint64_t seed, int64_t epoch) {
  LOCKSTEP_CHECK(datasetSize >= 0, "datasetSize = ", datasetSize, ", expected >= 0");
  std::vector<int64_t> order(static_cast<size_t>(datasetSize));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  std::mt19937_64 gen(seed + static_cast<uint64_t>(epoch));
  for (size_t i = order.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(uniformBelow(gen, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

DistributedSampler::DistributedSampler(SamplerOptions options) : options_(options) {
  LOCKSTEP_CHECK(options_.worldSize >= 1, "SamplerOptions.worldSize = ", options_.worldSize, ", expected >= 1");
  LOCKSTEP_CHECK(options_.rank >= 0 && options_.rank < options_.worldSize, "SamplerOptions.rank = ", options_.rank,
                 ", expected in [0, worldSize = ", options_.worldSize, ")");
  LOCKSTEP_CHECK(options_.datasetSize >= 0, "SamplerOptions.datasetSize = ", options_.datasetSize, ", expected >= 0");
  const int64_t n = options_.datasetSize;
  const int64_t world = options_.worldSize;
  numSamples_ = options_.dropLast ? n / world : (n + world - 1) / world;
  setEpoch(0);
}

void DistributedSampler::setEpoch(int64_t epoch) {
  epoch_ = epoch;
  std::vector<int64_t> order = globalOrder(options_.datasetSize, options_.shuffle, options_.seed, epoch);
  const int64_t n = options_.datasetSize;
  const int64_t total = totalSize();
  const int64_t world = options_.worldSize;
  indices_.clear();
  indices_.reserve(static_cast<size_t>(numSamples_));
  // Position p of the padded order is order[p % n]: the padding repeats the
  // permutation's first entries, cyclically when it is longer than n.
  for (int64_t p = options_.rank; p < total; p += world) { indices_.push_back(order[static_cast<size_t>(p % n)]); }
  LOCKSTEP_ASSERT(static_cast<int64_t>(indices_.size()) == numSamples_, "rank ", options_.rank, " got ",
                  indices_.size(), " indices, expected ", numSamples_);
}

int64_t DistributedSampler::numBatches(int64_t batchSize, bool dropLastBatch) const {
  LOCKSTEP_CHECK(batchSize >= 1, "batchSize = ", batchSize, ", expected >= 1");
  return dropLastBatch ? numSamples_ / batchSize : (numSamples_ + batchSize - 1) / batchSize;
}

std::vector<int64_t> DistributedSampler::batch(int64_t batchIndex, int64_t batchSize) const {
  const int64_t count = numBatches(batchSize, false);
  LOCKSTEP_CHECK(batchIndex >= 0 && batchIndex < count, "batchIndex = ", batchIndex, ", expected in [0, ", count,
                 ") for batchSize ", batchSize, " and ", numSamples_, " samples on rank ", options_.rank);
  const int64_t begin = batchIndex * batchSize;
  const int64_t end = std::min(begin + batchSize, numSamples_);
  return {indices_.begin() + begin, indices_.begin() + end};
}

}  // namespace lockstep

// DistributedSampler against PyTorch's semantics: one global permutation of the
// whole dataset per epoch, padded or cut to a multiple of the world, strided.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "lockstep/common/error.h"
#include "lockstep/data/sampler.h"

namespace lockstep {
namespace {

const int64_t kSizes[] = {0, 1, 2, 7, 10, 101};

SamplerOptions opts(int64_t n, int rank, int world, bool dropLast, bool shuffle = true, uint64_t seed = 7) {
  SamplerOptions o;
  o.datasetSize = n;
  o.rank = rank;
  o.worldSize = world;
  o.dropLast = dropLast;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

/// The indices of every rank for one epoch.
std::vector<std::vector<int64_t>> allRanks(int64_t n, int world, bool dropLast, int64_t epoch = 0, bool shuffle = true,
                                           uint64_t seed = 7) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(opts(n, r, world, dropLast, shuffle, seed));
    s.setEpoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

void expectErrorMentioning(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected lockstep::Error mentioning " << needle;
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what(); }
}

TEST(Sampler, GlobalOrderIsAPermutation) {
  for (int64_t n : kSizes) {
    for (int64_t epoch : {0, 1, 5}) {
      auto order = globalOrder(n, true, 3, epoch);
      ASSERT_EQ(static_cast<int64_t>(order.size()), n);
      std::sort(order.begin(), order.end());
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(order[i], i);
    }
  }
}

TEST(Sampler, EveryRankHasTheSameNumberOfSamples) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : kSizes) {
      for (bool dropLast : {false, true}) {
        const int64_t expected = dropLast ? n / world : (n + world - 1) / world;
        for (int r = 0; r < world; ++r) {
          DistributedSampler s(opts(n, r, world, dropLast));
          EXPECT_EQ(s.numSamples(), expected) << "n=" << n << " world=" << world << " dropLast=" << dropLast;
          EXPECT_EQ(static_cast<int64_t>(s.indices().size()), expected);
          EXPECT_EQ(s.totalSize(), expected * world);
        }
      }
    }
  }
}

TEST(Sampler, WithoutDropLastTheRanksCoverEverythingAndOnlyPaddingRepeats) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : kSizes) {
      const auto ranks = allRanks(n, world, false, 2);
      std::map<int64_t, int> count;
      int64_t total = 0;
      for (const auto& list : ranks) {
        for (int64_t i : list) {
          ASSERT_GE(i, 0);
          ASSERT_LT(i, n);
          ++count[i];
          ++total;
        }
      }
      EXPECT_EQ(static_cast<int64_t>(count.size()), n) << "n=" << n << " world=" << world;
      const int64_t padding = total - n;
      EXPECT_EQ(total, n == 0 ? 0 : (n + world - 1) / world * world);
      // The padding repeats the first `padding` entries of the global order.
      const auto order = globalOrder(n, true, 7, 2);
      std::map<int64_t, int> expected;
      for (int64_t i : order) expected[i] = 1;
      for (int64_t p = 0; p < padding; ++p) ++expected[order[static_cast<size_t>(p % n)]];
      EXPECT_EQ(count, expected) << "n=" << n << " world=" << world;
    }
  }
}

TEST(Sampler, WithDropLastTheRanksAreDisjoint) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : kSizes) {
      const auto ranks = allRanks(n, world, true, 1);
      std::set<int64_t> seen;
      for (const auto& list : ranks) {
        for (int64_t i : list) {
          EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks (n=" << n << ", world=" << world << ")";
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n / world * world);
    }
  }
}

TEST(Sampler, ThePermutationDoesNotDependOnTheWorldSize) {
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    for (bool dropLast : {false, true}) {
      DistributedSampler single(opts(n, 0, 1, false));
      single.setEpoch(3);
      const auto global = single.indices();
      ASSERT_EQ(global, globalOrder(n, true, 7, 3));
      for (int world = 2; world <= 4; ++world) {
        const auto ranks = allRanks(n, world, dropLast, 3);
        for (int r = 0; r < world; ++r) {
          for (size_t k = 0; k < ranks[r].size(); ++k) {
            const size_t position = r + k * world;  // strided, never sharded then shuffled
            EXPECT_EQ(ranks[r][k], global[position % n]) << "n=" << n << " world=" << world << " rank=" << r;
          }
        }
      }
    }
  }
}

TEST(Sampler, EpochsChangeTheOrderAndTheSameEpochRepeatsIt) {
  DistributedSampler s(opts(101, 1, 3, false));
  s.setEpoch(0);
  const auto epoch0 = s.indices();
  EXPECT_EQ(s.epoch(), 0);
  s.setEpoch(1);
  const auto epoch1 = s.indices();
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_NE(epoch0, epoch1);
  s.setEpoch(0);
  EXPECT_EQ(s.indices(), epoch0);
  DistributedSampler other(opts(101, 1, 3, false));
  other.setEpoch(1);
  EXPECT_EQ(other.indices(), epoch1) << "a fresh sampler with the same seed and epoch must agree";
  // seed + epoch is what seeds the shuffle.
  EXPECT_EQ(globalOrder(101, true, 7, 1), globalOrder(101, true, 8, 0));
  EXPECT_NE(globalOrder(101, true, 7, 0), globalOrder(101, true, 8, 0));
}

TEST(Sampler, ShuffleIsActuallyAShuffle) {
  const auto order = globalOrder(1000, true, 0, 0);
  int64_t fixedPoints = 0;
  for (int64_t i = 0; i < 1000; ++i) fixedPoints += order[i] == i;
  EXPECT_LT(fixedPoints, 10) << "a random permutation has about one fixed point";
}

TEST(Sampler, WithoutShuffleRanksTakeTheIdentityStrided) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : kSizes) {
      for (bool dropLast : {false, true}) {
        const auto ranks = allRanks(n, world, dropLast, 4, false);
        for (int r = 0; r < world; ++r) {
          for (size_t k = 0; k < ranks[r].size(); ++k) {
            EXPECT_EQ(ranks[r][k], static_cast<int64_t>((r + k * world) % n));
          }
        }
      }
    }
  }
  DistributedSampler s(opts(10, 1, 3, false, false));
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{1, 4, 7, 0}));
}

TEST(Sampler, BatchesAgreeWithIndices) {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t n : kSizes) {
      for (bool dropLast : {false, true}) {
        DistributedSampler s(opts(n, world - 1, world, dropLast));
        s.setEpoch(2);
        for (int64_t bs : {1, 3, 4, 200}) {
          const int64_t full = s.numSamples() / bs;
          const int64_t all = (s.numSamples() + bs - 1) / bs;
          EXPECT_EQ(s.numBatches(bs, true), full);
          EXPECT_EQ(s.numBatches(bs, false), all);
          std::vector<int64_t> joined;
          for (int64_t b = 0; b < all; ++b) {
            const auto batch = s.batch(b, bs);
            EXPECT_EQ(static_cast<int64_t>(batch.size()), b < full ? bs : s.numSamples() - full * bs);
            joined.insert(joined.end(), batch.begin(), batch.end());
          }
          EXPECT_EQ(joined, s.indices());
        }
      }
    }
  }
}

TEST(Sampler, BadOptionsNameTheField) {
  expectErrorMentioning([] { DistributedSampler s(opts(10, 0, 0, false)); }, "worldSize");
  expectErrorMentioning([] { DistributedSampler s(opts(10, 2, 2, false)); }, "rank");
  expectErrorMentioning([] { DistributedSampler s(opts(10, -1, 2, false)); }, "rank");
  expectErrorMentioning([] { DistributedSampler s(opts(-1, 0, 1, false)); }, "datasetSize");
  DistributedSampler s(opts(10, 0, 2, false));
  expectErrorMentioning([&] { s.numBatches(0, false); }, "batchSize");
  expectErrorMentioning([&] { s.batch(0, 0); }, "batchSize");
  expectErrorMentioning([&] { s.batch(2, 3); }, "batchIndex");
  expectErrorMentioning([&] { s.batch(-1, 3); }, "batchIndex");
  EXPECT_EQ(s.batch(1, 3), (std::vector<int64_t>{s.indices()[3], s.indices()[4]}));
}

}  // namespace
}  // namespace lockstep

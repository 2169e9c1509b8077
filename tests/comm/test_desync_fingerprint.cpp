// The pure part of the desync check (comm/desync_fingerprint.h) and the one
// description of an operation (comm/collective.h) every wrapper shares: the
// messages are checked here without processes, for cases that would need odd
// worlds or corrupted peers to reach through the communicator.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "comm/collective_args.h"
#include "comm/desync_fingerprint.h"
#include "common/byte_text.h"

namespace lockstep::detail {
namespace {

TEST(Collective, NamesEveryOperationOneWay) {
  EXPECT_EQ(Collective::allreduce(ReduceOp::kAvg).name(), "allreduce(avg)");
  EXPECT_EQ(Collective::broadcast(3).name(), "broadcast(root=3)");
  EXPECT_EQ(Collective::allgather().name(), "allgather");
  EXPECT_EQ(Collective::reduceScatter(ReduceOp::kMax).name(), "reduce_scatter(max)");
  EXPECT_EQ(Collective::barrier().name(), "barrier");
  EXPECT_EQ(Collective::send(1, 7).name(), "send(dst=1, tag=7)");
  EXPECT_EQ(Collective::recv(0, 2).name(), "recv(src=0, tag=2)");
}

TEST(Collective, ArgumentErrorsAndFingerprintsNameTheSameOperation) {
  CollectiveArgs args(0, 4, "gloo");
  std::vector<at::Tensor> tensors{at::zeros({4})};
  EXPECT_EQ(args.broadcast(tensors, 2).op, Collective::broadcast(2).name());
  EXPECT_EQ(args.allreduce(tensors, ReduceOp::kMin).op, Collective::allreduce(ReduceOp::kMin).name());
  EXPECT_EQ(args.barrier().op, "barrier");
  std::string described = describe(fingerprint(5, Collective::broadcast(2), tensors), false);
  EXPECT_EQ(described, "broadcast(root=2) float32 x 4 (16 B)");
}

TEST(Collective, BytesAndRankLists) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(4096), "4.0 KiB");
  EXPECT_EQ(formatBytes(3 << 19), "1.5 MiB");
  EXPECT_EQ(bytesOf(std::vector<at::Tensor>{at::zeros({3}, at::kDouble), at::Tensor()}), 24);
  EXPECT_EQ(rankNumbers({0, 1, 3}), "0, 1, 3");
  EXPECT_EQ(rankNumbers({0, 1, 2, 3, 4}, 2), "0, 1 and 3 more");
}

TEST(DesyncFingerprint, EqualViewsGiveNoMessage) {
  auto a = fingerprint(9, Collective::allreduce(ReduceOp::kSum), {at::zeros({2, 3})});
  EXPECT_EQ(compareFingerprints({a, a, a}, 9), "");
}

TEST(DesyncFingerprint, SameCountsInOtherShapesShowTheShapeHashes) {
  auto a = fingerprint(4, Collective::allreduce(ReduceOp::kSum), {at::zeros({2, 3})});
  auto b = fingerprint(4, Collective::allreduce(ReduceOp::kSum), {at::zeros({3, 2})});
  std::string message = compareFingerprints({a, b}, 4);
  EXPECT_NE(message.find("collectives out of step at #4: rank 0 calls allreduce(sum) float32 x 6 (24 B) [shapes "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(" but rank 1 calls allreduce(sum) float32 x 6 (24 B) [shapes "), std::string::npos) << message;
}

TEST(DesyncFingerprint, GroupsRanksByViewAndNamesAnExtraCollectiveBySequence) {
  auto reduce = fingerprint(3, Collective::allreduce(ReduceOp::kSum), {at::zeros({8})});
  auto extra = fingerprint(4, Collective::barrier(), {});
  std::string message = compareFingerprints({reduce, extra, reduce}, 3);
  EXPECT_EQ(message,
            "collectives out of step at #3: ranks 0, 2 call allreduce(sum) float32 x 8 (32 B) but rank 1 "
            "calls barrier as its collective #4");
}

TEST(DesyncFingerprint, MixedDtypesAndForeignPeersAreNamed) {
  auto mixed = fingerprint(1, Collective::allreduce(ReduceOp::kSum), {at::zeros({2}), at::zeros({2}, at::kDouble)});
  EXPECT_EQ(describe(mixed, false), "allreduce(sum) 2 tensors, mixed dtypes, 4 elements (24 B)");
  Fingerprint foreign = mixed;
  foreign.f[Fingerprint::kMagic] = 0;
  foreign.f[Fingerprint::kKind] = 99;
  EXPECT_EQ(describe(foreign, false).rfind("an unknown operation (fingerprint kind 99)", 0), 0u);
  EXPECT_NE(describe(foreign, false).find("[not a lockstep fingerprint]"), std::string::npos);
  Fingerprint badOp = mixed;
  badOp.f[Fingerprint::kReduceOp] = 42;
  EXPECT_EQ(describe(badOp, false).rfind("allreduce(op#42)", 0), 0u);
}

TEST(DesyncFingerprint, ManyViewsAreCappedAtFour) {
  std::vector<Fingerprint> all;
  for (int r = 0; r < 6; ++r) all.push_back(fingerprint(2, Collective::broadcast(r), {at::zeros({1})}));
  std::string message = compareFingerprints(all, 2);
  EXPECT_NE(message.find("rank 3 calls broadcast(root=3)"), std::string::npos) << message;
  EXPECT_EQ(message.find("root=4"), std::string::npos) << message;
  EXPECT_NE(message.find("; and 2 other views"), std::string::npos) << message;
}

}  // namespace
}  // namespace lockstep::detail

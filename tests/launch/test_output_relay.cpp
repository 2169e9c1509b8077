// The launcher's output relay without processes: chunks in, prefixed lines out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launch/output_relay.h"

namespace lockstep::detail {
namespace {

struct Captured {
  std::string out;
  std::string err;
  OutputRelay::Sink sink() {
    return [this](int fd, std::string_view text) { (fd == STDERR_FILENO ? err : out).append(text); };
  }
};

TEST(OutputRelay, WorkerLinesArePrefixedWholeAndTheStderrTailIsKept) {
  Captured c;
  OutputRelay relay(3, OutputRelay::Source::kWorker, /*prefix=*/true, /*tailLines=*/2, c.sink());
  relay.feed(false, "loss 0.");
  EXPECT_EQ(c.out, "") << "half a line must wait for its end";
  relay.feed(false, "41\nstep 2\nunfinished");
  relay.feed(true, "e1\ne2\ne3\n");
  relay.flush(false);
  EXPECT_EQ(c.out, "[3] loss 0.41\n[3] step 2\n[3] unfinished\n");
  EXPECT_EQ(c.err, "[3] e1\n[3] e2\n[3] e3\n");
  EXPECT_EQ(std::vector<std::string>(relay.tail().begin(), relay.tail().end()), (std::vector<std::string>{"e2", "e3"}));
}

TEST(OutputRelay, NodeLinesAndUnprefixedOutputPassAsTheyAre) {
  Captured node;
  OutputRelay fromNode(1, OutputRelay::Source::kNode, true, 5, node.sink());
  fromNode.feed(false, "[4] hello\n");
  EXPECT_EQ(node.out, "[4] hello\n");
  Captured plain;
  OutputRelay unprefixed(2, OutputRelay::Source::kWorker, /*prefix=*/false, 5, plain.sink());
  unprefixed.feed(false, "x\n");
  EXPECT_EQ(plain.out, "x\n");
}

TEST(OutputRelay, MpirunSegmentsAreJoinedPerRankAndItsFailureReportIsRead) {
  Captured c;
  OutputRelay relay(0, OutputRelay::Source::kMpirun, true, 5, c.sink());
  // Rank 2 wrote one stderr line in two pieces; rank 0 a stdout line.
  relay.feed(true, "[1,2]<stderr>:half [1,2]<stderr>:whole\n");
  relay.feed(false, "[1,0]<stdout>:ok\n");
  relay.feed(true, "mpirun noticed that process rank 2 with PID 77 exited on signal 9\n");
  EXPECT_EQ(c.out, "[0] ok\n");
  EXPECT_EQ(c.err, "[2] half whole\n[mpirun] mpirun noticed that process rank 2 with PID 77 exited on signal 9\n");
  EXPECT_EQ(relay.mpiFailedRank(), 2);
  EXPECT_EQ(relay.mpiFailedSignal(), 9);
  // OpenMPI 4's wording names the node; an exit code names no signal.
  OutputRelay other(0, OutputRelay::Source::kMpirun, true, 5, c.sink());
  other.feed(true, "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 15 (Terminated).\n");
  EXPECT_EQ(other.mpiFailedRank(), 1);
  EXPECT_EQ(other.mpiFailedSignal(), 15);
  OutputRelay exited(0, OutputRelay::Source::kMpirun, true, 5, c.sink());
  exited.feed(true, "  Process name: [[27543,1],3]\n");
  EXPECT_EQ(exited.mpiFailedRank(), 3);
  EXPECT_EQ(exited.mpiFailedSignal(), 0);
  ASSERT_NE(relay.rankTail(2), nullptr);
  EXPECT_EQ(relay.rankTail(2)->back(), "half whole");
  EXPECT_EQ(relay.rankTail(0), nullptr) << "stdout lines are not kept";
}

}  // namespace
}  // namespace lockstep::detail

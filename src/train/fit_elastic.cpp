// FitRun's elastic part (lockstep/train/elastic.h): after a lost worker, the next generation takes
// up the furthest completed step and the loop goes on from there at the new size.
#include <fmt/format.h>

#include <chrono>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/train/elastic.h"
#include "lockstep/train/recovery.h"
#include "train/fit_run.h"

namespace lockstep::detail {

void FitRun::joinWorld(std::shared_ptr<Communicator> comm) {
  commPtr_ = std::move(comm);
  rank_ = dataRank_ = commPtr_->rank();
  world_ = dataWorld_ = commPtr_->size();
  master_ = rank_ == 0;
}

/// An elastic run trains over the communicator of its first generation, not the one it was given:
/// a generation's communicator gives up a wait once a member went on to the next generation
/// (Membership, comm/abandonable.h), so that no survivor waits for its deadline after a loss.
void FitRun::formFirstGeneration() {
  Generation g = members_->next();
  LOCKSTEP_CHECK(g.rank == rank_ && g.size == world_, "the first generation of the elastic run has rank ", g.rank,
                 " of ", g.size, ", the communicator it was given rank ", rank_, " of ", world_);
  joinWorld(std::move(g.comm));
}

/// Where the loop stands once `step` steps are done. A step that ends an epoch leaves the epoch's
/// end (validation, checkpoint) to do: a member may have lost its generation in the middle of it.
Position FitRun::positionAfter(int64_t step) const {
  Position p;
  p.step = step;
  p.epoch = step / stepsPerEpoch_;
  p.batchInEpoch = (step % stepsPerEpoch_) * o_.accumulation;
  if (step > 0 && p.batchInEpoch == 0) {
    p.epoch -= 1;
    p.batchInEpoch = stepsPerEpoch_ * o_.accumulation;
  }
  return p;
}

/// A collective of this generation failed: with the members left (rendezvous/membership.h), form
/// the next one, take up the furthest completed step (train/recovery.h) and go on from it. Its
/// Error (fewer members than the minimum) ends the run.
void FitRun::takeUp(const CommError& failure) {
  const auto start = Clock::now();
  const int before = world_;
  log::warn(fmt::format("after step {}, a collective over {} worker(s) failed: {}; forming the next generation",
                        at_.step, before, failure.what()));
  Generation g = members_->next();
  Recovery r = recoverFromFurthest(std::move(strategy_), at_.step, g.comm, [this](std::shared_ptr<Communicator> comm) {
    return buildStrategy(std::move(comm));
  });
  strategy_ = std::move(r.strategy);
  joinWorld(std::move(g.comm));
  at_ = positionAfter(r.step);
  // The window's losses were of another world: the next progress line starts a new one.
  windowLoss_ = 0;
  windowSteps_ = 0;
  stepsSinceLog_ = 0;
  windowStart_ = Clock::now();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  events_.generation({g.number, r.step, world_, before, rank_, seconds, 0});
  if (master_) {
    log::info(fmt::format(
        "generation {}: {} worker(s) (were {}) go on from step {}, taken from rank {}, in {:.2f} s; global batch {}",
        g.number, world_, before, r.step, r.source, seconds, globalBatch_));
  }
}

/// SIGTERM in an elastic run: this worker leaves after the last step it completed, with no
/// collective (the others learn of it as of a loss, and go on from the furthest step).
FitResult FitRun::leave() {
  log::warn(fmt::format("SIGTERM: leaving the job after step {}; the others go on without this worker", at_.step));
  result_.leftAfterStep = at_.step;
  result_.steps = at_.step;
  result_.worldSize = world_;
  result_.globalBatch = globalBatch_;
  strategy_->end();
  events_.fitEnd(result_);
  return result_;
}

}  // namespace lockstep::detail

// FitRun's elastic part (lockstep/train/elastic.h): after a lost worker, the next generation takes
// up the furthest completed step and the loop goes on from there at the new size.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/train/elastic.h"
#include "lockstep/train/recovery.h"
#include "train/fit_run.h"
#include "train/join_fingerprint.h"

namespace lockstep::detail {

namespace {
/// Where the first generation's rank 0 keeps the job's fingerprint for newcomers.
constexpr const char* kFingerprintKey = "elastic/fingerprint";
}  // namespace

void FitRun::joinWorld(std::shared_ptr<Communicator> comm) {
  commPtr_ = std::move(comm);
  rank_ = dataRank_ = commPtr_->rank();
  world_ = dataWorld_ = commPtr_->size();
  master_ = rank_ == 0;
}

/// An elastic run trains over the communicator of its first generation, not the one it was given:
/// a generation's communicator gives up a wait once a member went on to the next generation
/// (Membership, comm/abandonable.h), so that no survivor waits for its deadline after a loss.
/// Its first member says in the store what a newcomer must share with it (join_fingerprint.h).
void FitRun::formFirstGeneration() {
  Generation g = members_->next();
  LOCKSTEP_CHECK(g.rank == rank_ && g.size == world_, "the first generation of the elastic run has rank ", g.rank,
                 " of ", g.size, ", the communicator it was given rank ", rank_, " of ", world_);
  joinWorld(std::move(g.comm));
  if (master_) {
    const std::string text = fingerprint();
    Store(o_.elastic->store).set(kFingerprintKey, std::vector<uint8_t>(text.begin(), text.end()));
  }
}

std::string FitRun::fingerprint() const {
  return joinFingerprint(o_, *model_, globalBatch_, static_cast<int64_t>(train_.size()), totalSteps_);
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
  log::warn(fmt::format("after step {}, a collective over {} worker(s) failed: {}; forming the next generation",
                        at_.step, world_, failure.what()));
  const auto start = Clock::now();
  formNextGeneration(start, members_->next());
}

/// A newcomer waits at the next generation: every member forms it at its next step boundary (one
/// that went on into a collective is given up there: comm/abandonable.h, and comes by takeUp).
void FitRun::grow() {
  growing_ = false;
  if (master_) log::info(fmt::format("after step {}, a worker waits to join: forming the next generation", at_.step));
  const auto start = Clock::now();
  formNextGeneration(start, members_->next());
}

bool FitRun::stopsHere() {
  if (leaving()) return true;
  growing_ = members_ && members_->nextStarted();
  return growing_;
}

/// Goes on in generation `g` (formed since `start`) from the furthest step any member completed:
/// this member's is at_.step, a newcomer's none (its strategy_ is null).
void FitRun::formNextGeneration(Clock::time_point start, Generation g) {
  const int members = static_cast<int>(
      std::count_if(g.previousRanks.begin(), g.previousRanks.end(), [](int previous) { return previous >= 0; }));
  const int before = strategy_ ? world_ : members;
  const int newcomers = g.size - members;
  Recovery r = recoverFromFurthest(std::move(strategy_), at_.step, g.comm, [this](std::shared_ptr<Communicator> comm) {
    return buildStrategy(std::move(comm));
  });
  strategy_ = std::move(r.strategy);
  joinWorld(std::move(g.comm));
  at_ = positionAfter(r.step);
  if (sampleLog_) sampleLog_->generation(g.number, rank_, world_, r.step);
  // Each member's end-of-run marks are its own: from here the members do the same again.
  validatedStep_ = savedStep_ = -1;
  // The window's losses were of another world: the next progress line starts a new one.
  windowLoss_ = 0;
  windowSteps_ = 0;
  stepsSinceLog_ = 0;
  windowStart_ = Clock::now();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  events_.generation({g.number, r.step, world_, before, rank_, seconds, 0});
  if (master_) {
    log::info(fmt::format(
        "generation {}: {} worker(s) (were {}) go on from step {}, taken from rank {}, in {:.2f} s; global batch {}; "
        "{} gone, {} new",
        g.number, world_, before, r.step, r.source, seconds, globalBatch_, before - members, newcomers));
  }
}

/// A newcomer to the running job: joins the members at their next generation and takes up their
/// state; false (FitResult::leftAfterStep 0) when the job finished before it could join.
bool FitRun::joinAsNewcomer() {
  const auto start = Clock::now();
  log::info("a newcomer to the running job: joining the workers at their next step");
  const std::vector<uint8_t> job = Store(o_.elastic->store).get(kFingerprintKey);
  checkJoinFingerprint(fingerprint(), std::string(job.begin(), job.end()));
  strategy_.reset();  // the one of its own world: nothing to give
  for (;;) {
    if (members_->finished()) break;
    try {
      formNextGeneration(start, members_->next());
      return true;
    } catch (const LateMemberError& late) { log::debug(late.what()); } catch (const Error&) {
      if (!members_->finished()) throw;
    }
  }
  log::info("the job finished its training before this worker could join: nothing to do");
  result_.leftAfterStep = 0;  // no fitStart, no fitEnd: it took no part in the run
  result_.globalBatch = globalBatch_;
  return false;
}

/// SIGTERM in an elastic run: this worker leaves after the last step it completed, with no
/// collective (the others learn of it as of a loss, and go on from the furthest step).
FitResult FitRun::leave() {
  log::warn(fmt::format("SIGTERM: leaving the job after step {}; the others go on without this worker", at_.step));
  try {
    members_->leave();  // the launcher may refill the slot
  } catch (const std::exception& e) {
    log::debug(std::string("saying in the store that this worker leaves: ") + e.what());
  }
  result_.leftAfterStep = at_.step;
  result_.steps = at_.step;
  result_.worldSize = world_;
  result_.rank = rank_;
  result_.globalBatch = globalBatch_;
  strategy_->end();
  events_.fitEnd(result_);
  return result_;
}

}  // namespace lockstep::detail

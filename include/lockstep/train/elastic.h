// lockstep/train/elastic.h — a Trainer that goes on when workers are lost (docs/elastic.md).
//
//   lockstep::Context ctx = lockstep::init();
//   options.elastic = lockstep::elasticTraining(ctx);  // null unless `lockstep run --min-np` started us
//
// With TrainerOptions::elastic set, fit() trains at a fixed global batch (the one it starts with,
// trainer.batch_size x workers x accumulation) by a GlobalBatchPlan's shares
// (data/global_batches.h), so that a step trains the same samples at any world size. When a
// collective fails (a worker was lost), the others form the next generation through the job's
// store (rendezvous/membership.h), take up the furthest completed step from its first member
// (train/recovery.h) and go on at the new size with the learning rate of the starting global
// batch, reading no file. Below the launcher's minimum the generation's Error ends the run.
// A newcomer (a worker `lockstep run` starts in a lost worker's slot, kNewcomerVar) joins the
// members at their next step boundary, where they form the next generation with it, and takes up
// their state from the first of them over the communicator; one that arrives after the last step
// returns from fit() with FitResult::leftAfterStep 0, having trained nothing.
// SIGTERM to one worker (a preemption) makes it leave after the step it is in, or as soon as a
// collective fails: fit() returns with FitResult::leftAfterStep, and the others go on without it.
// Elastic runs are data-parallel with strategy ddp on the CPU, without gradient compression,
// pipeline stages or fp16 (their state is not whole on every rank); fit() refuses the others
// with a ConfigError naming the setting.
#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/store/store.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/rendezvous/membership.h"

namespace lockstep {

struct ElasticTraining {
  Store store;                   ///< the job's store (Context::store), where the generations meet
  MembershipOptions membership;  ///< the generations' sizes and communicators
  int rank = 0;                  ///< this worker's rank in the world init() formed (a newcomer's: its slot's)
  int launchWorld = 1;           ///< the workers the job was launched with: the global batch is planned for them
  bool newcomer = false;         ///< started into the running job (kNewcomerVar): joins at the members' next step
  std::string memberId;          ///< names this worker in the generations' logs and errors
};

/// The elastic training of a worker of `lockstep run --min-np` (the launcher's LOCKSTEP_MIN_NP and
/// LOCKSTEP_MAX_NP, elasticMembershipOptions()) over `ctx`'s store; null when the job is not elastic.
std::shared_ptr<const ElasticTraining> elasticTraining(const Context& ctx, const Environment& env);

}  // namespace lockstep

// An elastic worker's training (lockstep/train/elastic.h) and what an elastic run refuses.
#include "lockstep/train/elastic.h"

#include <unistd.h>

#include <fmt/format.h>

#include "common/posix_io.h"
#include "lockstep/common/error.h"
#include "lockstep/train/trainer.h"
#include "train/elastic_checks.h"

namespace lockstep {

std::shared_ptr<const ElasticTraining> elasticTraining(const Context& ctx, const Environment& env) {
  auto membership = elasticMembershipOptions(env);
  if (!membership) return nullptr;
  return std::make_shared<const ElasticTraining>(
      ElasticTraining{ctx.store, std::move(*membership), ctx.world.rank,
                      static_cast<int>(env.getInt(kStartMembersVar, 1, 1 << 20).value_or(ctx.world.worldSize)),
                      env.get(kNewcomerVar).value_or("") == "1",
                      fmt::format("rank {} ({}:{})", ctx.world.rank, detail::hostName(), ::getpid())});
}

namespace detail {

namespace {
volatile sig_atomic_t leaveRequested = 0;
extern "C" void onSigterm(int) { leaveRequested = 1; }
}  // namespace

LeaveOnSigterm::LeaveOnSigterm() {
  leaveRequested = 0;
  struct sigaction action {};
  action.sa_handler = onSigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a blocked read or write goes on: the step ends as it would
  ::sigaction(SIGTERM, &action, &previous_);
}

LeaveOnSigterm::~LeaveOnSigterm() { ::sigaction(SIGTERM, &previous_, nullptr); }

bool LeaveOnSigterm::requested() { return leaveRequested != 0; }

void checkElasticOptions(const TrainerOptions& o) {
  auto refuse = [](const std::string& setting) {
    throw ConfigError(fmt::format(
        "{}: an elastic run (lockstep run --min-np) keeps the whole training state on every worker, so that any "
        "survivor can hand it on; run it without --min-np",
        setting));
  };
  if (o.schedule != Schedule::kSync) refuse(fmt::format("schedule.type {}", toString(o.schedule)));
  if (o.strategy != StrategyType::kDdp) refuse(fmt::format("strategy.type {}", toString(o.strategy)));
  if (o.pipeline.stages > 1) refuse(fmt::format("parallel.pipeline {}", o.pipeline.stages));
  // PowerSGD's error feedback and a user's hook keep per-rank state; fp16 and bf16 compression keep none.
  if (o.ddp.hook) refuse("a DDP communication hook (SyncOptions::hook)");
  if (o.ddp.compression == GradCompression::kPowerSgd) refuse("ddp.compression powersgd");
  if (o.precision == Precision::kFp16) refuse("precision fp16 (its loss scale)");
  if (!o.loader.device.is_cpu()) {
    throw ConfigError(fmt::format("device {}: an elastic run's generations meet over gloo on the CPU; set device: cpu",
                                  o.loader.device.str()));
  }
}

}  // namespace detail
}  // namespace lockstep

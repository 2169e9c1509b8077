// fit_run.h — one Trainer::fit() call at work: the loop (fit_run.cpp) and what it reports
// (fit_reports.cpp: validation, log windows, checkpoints, memory, the end). Private to train/.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/comm_error.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/train/strategy.h"
#include "lockstep/train/trainer.h"
#include "train/elastic_checks.h"
#include "train/fit_events.h"
#include "train/run_memory.h"
#include "train/sample_log.h"
#include "train/step_samples.h"
#include "train/step_timer.h"
#include "train/training_state.h"
#include "train/validation.h"

namespace lockstep::detail {

using Clock = std::chrono::steady_clock;

class FitRun {
 public:
  /// `options.loader.device` is the run's device, where `model` already is.
  FitRun(std::shared_ptr<Communicator> comm, const TrainerOptions& options, const LayeredModel& model,
         const FaultInjection& faults, const Dataset& train, const Dataset* validation);
  FitResult run();

 private:
  void announce(const std::string& strategy);
  void runEpoch();
  void endEpoch();
  void resume();
  void endRun();
  void formFirstGeneration();
  bool joinAsNewcomer();
  std::string fingerprint() const;  // what a newcomer must share with the job (join_fingerprint.h)
  void takeUp(const CommError& failure);
  void grow();
  void formNextGeneration(Clock::time_point start, Generation g);
  FitResult leave();
  bool leaving() const { return leaveOnSigterm_ && LeaveOnSigterm::requested(); }
  /// Whether the loop stops at this step boundary: SIGTERM, or a newcomer waits (sets growing_).
  bool stopsHere();
  Position positionAfter(int64_t step) const;
  double trainStep(std::vector<BucketTiming>& messages);
  bool agreeLossIsFinite(double stepLoss);
  bool unscaleGradients();
  void injectInfGradient();
  void logWindow();
  void validate(const std::string& when, int64_t ofEpoch);
  std::unique_ptr<Strategy> buildStrategy(std::shared_ptr<Communicator> comm);
  /// The world the global batch is planned for: the run's (an elastic run's, the one it started with).
  int64_t batchWorld() const { return globalBatch_ / (o_.batchSize * o_.accumulation); }
  void saveCheckpoint();
  std::vector<double> gatherLogWindow();
  void finish();
  double applyLearningRate();

  /// The communicator of the ranks training now; with rank_ .. dataWorld_, set by joinWorld().
  Communicator& comm() const { return *commPtr_; }
  void joinWorld(std::shared_ptr<Communicator> comm);  // a generation of an elastic run (no pipeline stages)

  std::shared_ptr<Communicator> commPtr_;
  const TrainerOptions& o_;
  const FaultInjection& faults_;
  const FitEvents events_;  // before timer_, which takes its origin
  const LayeredModel layered_;
  std::shared_ptr<torch::nn::Module> model_;
  const bool withAccuracy_;  // the model has an accuracy function
  const Dataset& train_;
  const Dataset* validation_;
  int rank_ = 0;
  int world_ = 1;
  bool master_ = true;
  int dataRank_ = 0;      // this rank's pipeline (rank / stages); the rank without pipeline stages
  int dataWorld_ = 1;     // pipelines (world / stages)
  const bool newcomer_;   // an elastic run's worker started into the running job (joins at a boundary)
  bool growing_ = false;  // a newcomer waits for the members at the next generation

  StepSamples samples_;
  std::vector<double> microScales_;       // the loss weight of each micro-batch of the loader's plan
  std::unique_ptr<SampleLog> sampleLog_;  // trainer.sample_log (the first stage of each pipeline)
  int64_t planStart_ = 0;                 // the plan's first micro-batch in the epoch
  const int64_t microPerEpoch_;
  int64_t stepsPerEpoch_ = 0;
  int64_t totalSteps_ = 0;
  const int64_t globalBatch_;
  LrScalingOptions scaling_;
  std::vector<double> baseLrs_;  // per parameter group, as the optimizer was built

  std::unique_ptr<Membership> members_;           // an elastic run's generations (elastic.h)
  std::optional<LeaveOnSigterm> leaveOnSigterm_;  // an elastic run's
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<LossScaler> scaler_;  // precision fp16
  std::unique_ptr<CheckpointDir> checkpoints_;
  DataLoader loader_;
  detail::StepTimer timer_;
  Position at_;
  FitResult result_;
  int64_t savedStep_ = -1;
  int64_t validatedStep_ = -1;
  RunMemory memory_;
  detail::RunMetrics::Reported regular_;  // what a checkpoint keeps of the reports (training_state.h)
  double windowLoss_ = 0;
  int64_t windowSteps_ = 0;
  int64_t stepsSinceLog_ = 0;  // in this process (a resumed window's earlier steps were timed by another)
  Clock::time_point windowStart_;
  Clock::time_point runStart_;
};

}  // namespace lockstep::detail

// train_result_json.cpp — `lockstep train --result-json PATH`: the FitResult as
// JSON, the file `lockstep bench scaling` reads back.
//
// Schema (seconds are per optimizer step, means over the timed steps — the
// first step of the run is excluded — on rank 0; *_max is the max over ranks):
//   {"rank":0, "world_size":2, "threads_per_worker":1, "steps":100, "timed_steps":99,
//    "resumed_from_step":0, "skipped_steps":0, "overflow_steps":0, "loss_scale":null (fp16: the scale),
//    "global_batch":256, "seconds":..., "samples_per_second":...,
//    "data_wait_seconds":..., "last_train_loss":..., "last_validation_loss":...,
//    "last_validation_accuracy":..., "step_seconds":..., "step_seconds_max":...,
//    "phases_seconds":{"data_wait":..., "forward":..., "backward":..., "comm_wait":..., "optimizer":...},
//    "comm":{"seconds":..., "exposed_seconds":..., "exposed_seconds_max":...,
//            "hidden_fraction":0.8 or null, "buckets":1, "bucket_bytes":1686568,
//            "bucket_profile":[{"bytes":..., "ready_seconds":..., "comm_seconds":...}, ...]},
//            (per bucket in launch order: release after backward's start, service time; trainer.h)
//    "memory":{"ranks":[{"rank":0, "parameter_bytes":..., "gradient_bytes":..., "optimizer_bytes":...,
//              "comm_buffer_bytes":..., "step_peak_bytes":... or null, "peak_rss_bytes":...}, ...]}}
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/posix_io.h"
#include "lockstep/common/error.h"
#include "lockstep/train/trainer.h"
#include "monitor/memory_json.h"

namespace lockstep::cli {

namespace {

nlohmann::json toJson(const FitResult& r, int rank, int threads) {
  const StepBreakdown& b = r.breakdown;
  nlohmann::json phases = nlohmann::json::object();
  for (int p = 0; p < kPhaseCount; ++p)
    phases[toString(static_cast<Phase>(p))] = b.phaseSeconds[static_cast<size_t>(p)];
  nlohmann::json comm = {{"seconds", b.commSeconds},
                         {"exposed_seconds", b.commExposedSeconds},
                         {"exposed_seconds_max", b.commExposedSecondsMax},
                         {"hidden_fraction", nullptr},
                         {"buckets", b.buckets},
                         {"bucket_bytes", b.bucketBytes}};
  if (b.commHiddenFraction >= 0) comm["hidden_fraction"] = b.commHiddenFraction;
  nlohmann::json profile = nlohmann::json::array();
  for (const BucketProfile& p : b.bucketProfile)
    profile.push_back({{"bytes", p.bytes}, {"ready_seconds", p.readySeconds}, {"comm_seconds", p.commSeconds}});
  comm["bucket_profile"] = profile;
  nlohmann::json ranks = detail::rankMemoryJson<nlohmann::json>(r.memory);
  return {{"rank", rank},
          {"world_size", r.worldSize},
          {"threads_per_worker", threads},
          {"steps", r.steps},
          {"timed_steps", b.steps},
          {"resumed_from_step", r.resumedFromStep},
          {"skipped_steps", r.skippedSteps},
          {"overflow_steps", r.overflowSteps},
          {"loss_scale", r.lossScale > 0 ? nlohmann::json(r.lossScale) : nullptr},
          {"global_batch", r.globalBatch},
          {"seconds", r.seconds},
          {"samples_per_second", r.samplesPerSecond},
          {"data_wait_seconds", r.dataWaitSeconds},
          {"last_train_loss", r.lastTrainLoss},
          {"last_validation_loss", r.lastValidationLoss},
          {"last_validation_accuracy", r.lastValidationAccuracy},
          {"step_seconds", b.stepSeconds},
          {"step_seconds_max", b.stepSecondsMax},
          {"phases_seconds", phases},
          {"comm", comm},
          {"pipeline_idle_fraction", b.pipelineIdleFraction >= 0 ? nlohmann::json(b.pipelineIdleFraction) : nullptr},
          {"pipeline_bubble", b.pipelineBubble >= 0 ? nlohmann::json(b.pipelineBubble) : nullptr},
          {"pipeline_idle_fraction_max",
           b.pipelineIdleFractionMax >= 0 ? nlohmann::json(b.pipelineIdleFractionMax) : nullptr},
          {"memory", {{"ranks", ranks}}},
          {"ps_staleness", r.ps.staleness.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ps.staleness)},
          {"ps_wait_seconds", r.ps.waitSeconds.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ps.waitSeconds)},
          {"ps_max_staleness", r.ps.staleness.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ps.maxStaleness)}};
}

class ResultJsonWriter : public TrainerCallback {
 public:
  ResultJsonWriter(std::string path, int threads) : path_(std::move(path)), threads_(threads) {}

  void onFitStart(const FitInfo& info) override { rank_ = info.rank; }

  void onFitEnd(const FitResult& result) override {
    if (rank_ != 0) return;
    // A reader never sees half a document.
    try {
      detail::writeFileAtomically(path_, {toJson(result, rank_, threads_).dump(2) + "\n"},
                                  detail::Durability::kProcessCrash);
    } catch (const Error& e) { throw Error(fmt::format("--result-json: {}", e.what())); }
  }

 private:
  std::string path_;
  int threads_;
  int rank_ = 0;
};

}  // namespace

std::shared_ptr<TrainerCallback> makeResultJsonWriter(const std::string& path, int threadsPerWorker) {
  return std::make_shared<ResultJsonWriter>(path, threadsPerWorker);
}

}  // namespace lockstep::cli

#include "lockstep/monitor/metrics_writer.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/monitor/tensorboard.h"
#include "lockstep/train/trainer.h"
#include "monitor/memory_json.h"
#include "monitor/run_files.h"

namespace lockstep {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kCsvHeader = "kind,step,epoch,time,loss,lr,samples_per_sec,step_time,val_loss,val_accuracy\n";

std::string join(const std::string& dir, const char* name) { return (std::filesystem::path(dir) / name).string(); }

/// A CSV cell: shortest round-trip text of the number.
std::string cell(double value) { return fmt::format("{}", value); }

}  // namespace

MetricsWriter::MetricsWriter(const std::string& dir, const std::string& runName, const std::string& configText,
                             bool tensorboard, bool standby)
    : dir_(dir), runName_(runName.empty() ? detail::runNameOf(dir) : runName), hostname_(detail::hostName()),
      configText_(configText), tensorboard_(tensorboard), standby_(standby), startTime_(detail::unixNow()),
      jsonl_(std::make_unique<detail::AppendFile>()), csv_(std::make_unique<detail::AppendFile>()) {
  if (!standby_) open();
}

/// The run's files: config.yaml written, the metrics files opened for appending, the event file.
void MetricsWriter::open() {
  detail::createDirectories(dir_);
  detail::writeFileAtomically(join(dir_, "config.yaml"), {configText_}, detail::Durability::kProcessCrash);
  jsonl_->open(join(dir_, "metrics.jsonl"));
  csv_->open(join(dir_, "metrics.csv"));
  if (csv_->wasEmpty()) csv_->writeLine(kCsvHeader);
  if (tensorboard_) events_ = std::make_unique<TensorBoardWriter>(dir_);
}

MetricsWriter::~MetricsWriter() {
  if (started_ && !ended_ && !standby_) writeRunJson("failed");
}

void MetricsWriter::writeRunJson(const char* status) {
  Json run;
  run["name"] = runName_;
  run["start_time"] = startTime_;
  run["updated_time"] = detail::unixNow();
  run["world_size"] = info_.worldSize;
  run["hostname"] = hostname_;
  run["status"] = status;
  run["total_steps"] = info_.totalSteps;
  run["step"] = step_;
  run["global_batch"] = info_.globalBatch;
  run["epochs"] = info_.epochs;
  run["steps_per_epoch"] = info_.stepsPerEpoch;
  run["start_step"] = info_.startStep;
  run["pid"] = static_cast<int64_t>(::getpid());
  if (!generations_.empty()) {
    Json list = Json::array();
    for (const auto& g : generations_) {
      list.push_back({{"generation", g.generation},
                      {"step", g.step},
                      {"time", unixTime(g.timeUs)},
                      {"world_size", g.worldSize},
                      {"previous_world_size", g.previousWorldSize},
                      {"recovery_seconds", g.seconds}});
    }
    run["generations"] = std::move(list);
  }
  if (!memory_.empty()) run["memory"] = detail::rankMemoryJson<Json>(memory_);
  if (!staleness_.empty()) {
    run["ps"] = {{"staleness_bound", static_cast<int64_t>(staleness_.size()) - 1},
                 {"staleness", staleness_},
                 {"max_staleness", maxStaleness_},
                 {"wait_seconds", psWaitSeconds_}};
  }
  try {
    detail::writeFileAtomically(join(dir_, "run.json"), {run.dump(2) + "\n"}, detail::Durability::kProcessCrash);
  } catch (const std::exception& e) { detail::warnOnce(warned_, "writing run.json", e.what()); }
}

void MetricsWriter::onFitStart(const FitInfo& info) {
  info_ = info;
  step_ = info.startStep;
  started_ = true;
  if (!standby_) writeRunJson("running");
}

void MetricsWriter::onStepEnd(const StepRecord& record) { step_ = record.step; }

void MetricsWriter::onLog(const LogRecord& r) {
  if (standby_) return;
  try {
    double time = unixTime(r.timeUs);
    Json line;
    line["kind"] = "train";
    line["step"] = r.step;
    line["epoch"] = r.epoch;
    line["time"] = time;
    line["loss"] = r.loss;
    line["lr"] = r.lr;
    line["samples_per_sec"] = r.samplesPerSecond;
    line["step_time"] = r.stepSeconds;
    jsonl_->writeLine(line.dump() + "\n");
    csv_->writeLine(fmt::format("train,{},{},{},{},{},{},{},,\n", r.step, r.epoch, cell(time), cell(r.loss), cell(r.lr),
                                cell(r.samplesPerSecond), cell(r.stepSeconds)));
    if (events_) {
      events_->addScalar("train/loss", r.step, r.loss, time);
      events_->addScalar("train/lr", r.step, r.lr, time);
      events_->addScalar("train/samples_per_sec", r.step, r.samplesPerSecond, time);
      events_->addScalar("train/step_time", r.step, r.stepSeconds, time);
      events_->flush();
    }
    step_ = std::max(step_, r.step);
  } catch (const std::exception& e) { detail::warnOnce(warned_, "writing metrics", e.what()); }
  writeRunJson("running");
}

void MetricsWriter::onValidation(const ValidationRecord& r) {
  if (standby_) return;
  try {
    double time = unixTime(r.timeUs);
    bool hasAccuracy = r.accuracy >= 0;
    Json line;
    line["kind"] = "val";
    line["step"] = r.step;
    line["epoch"] = r.epoch;
    line["time"] = time;
    line["val_loss"] = r.loss;
    line["val_accuracy"] = hasAccuracy ? Json(r.accuracy) : Json(nullptr);
    jsonl_->writeLine(line.dump() + "\n");
    csv_->writeLine(fmt::format("val,{},{},{},,,,,{},{}\n", r.step, r.epoch, cell(time), cell(r.loss),
                                hasAccuracy ? cell(r.accuracy) : std::string()));
    if (events_) {
      events_->addScalar("val/loss", r.step, r.loss, time);
      if (hasAccuracy) events_->addScalar("val/accuracy", r.step, r.accuracy, time);
      events_->flush();
    }
  } catch (const std::exception& e) { detail::warnOnce(warned_, "writing metrics", e.what()); }
}

/// A new generation of an elastic run: a metrics line, TensorBoard's elastic/ scalars, run.json's
/// world size and "generations".
void MetricsWriter::onGeneration(const GenerationRecord& r) {
  generations_.push_back(r);
  info_.worldSize = r.worldSize;
  if (standby_) {
    if (r.rank != 0) return;
    try {  // the run's rank 0 was lost: this one writes its files from now on
      open();
      standby_ = false;
    } catch (const std::exception& e) {
      detail::warnOnce(warned_, "taking over the run's files", e.what());
      return;
    }
  }
  try {
    const double time = unixTime(r.timeUs);
    Json line;
    line["kind"] = "generation";
    line["step"] = r.step;
    line["time"] = time;
    line["generation"] = r.generation;
    line["world_size"] = r.worldSize;
    line["previous_world_size"] = r.previousWorldSize;
    line["recovery_seconds"] = r.seconds;
    jsonl_->writeLine(line.dump() + "\n");
    if (events_) {
      events_->addScalar("elastic/world_size", r.step, r.worldSize, time);
      events_->addScalar("elastic/recovery_seconds", r.step, r.seconds, time);
      events_->flush();
    }
  } catch (const std::exception& e) { detail::warnOnce(warned_, "writing metrics", e.what()); }
  writeRunJson("running");
}

void MetricsWriter::onFitEnd(const FitResult& result) {
  ended_ = true;
  if (standby_) return;
  memory_ = result.memory;
  staleness_ = result.ps.staleness;
  maxStaleness_ = result.ps.maxStaleness;
  psWaitSeconds_ = result.ps.waitSeconds;
  writeRunJson("finished");
}

}  // namespace lockstep

#include "lockstep/monitor/monitor.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/monitor/metrics_writer.h"
#include "lockstep/monitor/progress.h"
#include "lockstep/monitor/step_timeline.h"
#include "lockstep/monitor/system_stats.h"
#include "monitor/run_files.h"

namespace lockstep {

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

ProgressMode parseProgressMode(const std::string& text, const std::string& what) {
  static constexpr EnumName<ProgressMode> kNames[] = {{ProgressMode::kAuto, "auto"},   {ProgressMode::kBar, "bar"},
                                                      {ProgressMode::kLines, "lines"}, {ProgressMode::kOff, "off"},
                                                      {ProgressMode::kOff, "none"},    {ProgressMode::kOff, "false"}};
  return parseEnum(kNames, text, what);
}

std::string defaultRunDir(const std::string& configFile) {
  std::string stem = configFile.empty() ? "" : std::filesystem::path(configFile).stem().string();
  return "runs/" + (stem.empty() ? std::string("default") : stem);
}

bool monitorDisabled(const std::string& dir) {
  auto d = lower(dir);
  return d == "off" || d == "none" || d == "false";
}

std::vector<std::shared_ptr<TrainerCallback>> makeMonitorCallbacks(const MonitorOptions& o) {
  LOCKSTEP_CHECK(!o.dir.empty(), "MonitorOptions::dir is empty; name the run directory");
  LOCKSTEP_CHECK(o.rank >= 0 && o.rank < o.worldSize, "MonitorOptions: rank ", o.rank, " is outside world size ",
                 o.worldSize);
  LOCKSTEP_CHECK_GE(o.systemInterval, 0.0, "(MonitorOptions::systemInterval, seconds; 0 turns sampling off)");
  LOCKSTEP_CHECK_GE(o.traceSteps, int64_t{-1}, "(MonitorOptions::traceSteps: -1 every step, 0 none)");
  detail::createDirectories(o.dir);
  std::vector<std::shared_ptr<TrainerCallback>> callbacks;
  const bool first = o.rank == 0 && !o.newcomer;  // rank 0 from the start
  if (first || o.elastic) {
    callbacks.push_back(
        std::make_shared<MetricsWriter>(o.dir, o.runName, o.configText, o.tensorboard, /*standby=*/!first));
  }
  auto timeline = std::make_shared<StepTimeline>(o.dir, o.rank, o.traceSteps);
  callbacks.push_back(timeline);
  if (o.systemInterval > 0) {
    auto system = std::make_shared<SystemMonitor>(o.dir, o.rank, o.systemInterval, o.localRank, o.tensorboard);
    timeline->drawSystemSamples(system->samples());
    callbacks.push_back(system);
  }
  if (first && o.progress != ProgressMode::kOff) {
    callbacks.push_back(std::make_shared<ProgressReporter>(o.progress, o.progressInterval));
  }
  return callbacks;
}

}  // namespace lockstep

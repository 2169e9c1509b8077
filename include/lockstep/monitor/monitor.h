// lockstep/monitor/monitor.h — the run directory a training run writes, and
// the callbacks that write it.
//
//   MonitorOptions m;  m.dir = "runs/fashion";  m.rank = world.rank;  m.worldSize = world.worldSize;
//   for (auto& cb : makeMonitorCallbacks(m)) trainerOptions.callbacks.push_back(cb);
//
// The layout is a file-format contract (the dashboard reads nothing else);
// docs/monitoring.md describes every field:
//   run.json, config.yaml, metrics.jsonl, metrics.csv,
//   events.out.tfevents.<unix seconds>.<host>                 rank 0
//   system/rank<R>.jsonl, phases/rank<R>.jsonl,
//   timeline/rank<R>.trace.json,
//   system/rank<R>/events.out.tfevents.<unix seconds>.<host>  every rank
// plus a progress bar (or plain progress lines) on rank 0's stderr.
//
// makeMonitorCallbacks() creates the directories and opens the files: when it
// cannot, it throws lockstep::Error naming the path, before training starts.
// After that monitoring never stops training: a failed write is logged once as
// a warning and that file is no longer written. An existing run directory (a
// resumed run) is appended to: metrics.jsonl/csv and the per-rank JSONL files
// keep their earlier lines; run.json, config.yaml and the trace are rewritten.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/train/callbacks.h"

namespace lockstep {

/// How rank 0 shows progress on stderr.
enum class ProgressMode {
  kAuto,   ///< a bar when stderr is a terminal, else plain lines
  kBar,    ///< a one-line bar redrawn with '\r' (at most 4 times a second)
  kLines,  ///< a log line every MonitorOptions::progressInterval seconds
  kOff,
};
/// Parses auto, bar, lines, off; throws ConfigError naming `what`.
ProgressMode parseProgressMode(const std::string& text, const std::string& what);

struct MonitorOptions {
  std::string dir;      ///< the run directory (created with its parents)
  std::string runName;  ///< empty: the directory's last component
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;            ///< which GPU the NVML sampler reports (where libnvidia-ml loads)
  std::string configText;       ///< the resolved config, written to config.yaml by rank 0
  double systemInterval = 1.0;  ///< seconds between system samples; 0: no system/ files
  int64_t traceSteps = 50;      ///< steps recorded in the Chrome trace; 0: no trace; -1: every step
  ProgressMode progress = ProgressMode::kAuto;
  double progressInterval = 10;  ///< seconds between plain progress lines
  bool tensorboard = true;       ///< write the events.out.tfevents file
  /// An elastic run (train/elastic.h): every rank keeps a MetricsWriter in standby, which takes
  /// the run's files over when a new generation makes it rank 0.
  bool elastic = false;
  /// A newcomer to an elastic run (ElasticTraining::newcomer): its slot's rank is not its rank in
  /// the generation it joins, so its writer starts in standby and it reports no progress.
  bool newcomer = false;
};

/// The callbacks that write `options.dir` on this rank: metrics, TensorBoard
/// events and progress on rank 0 (metrics in standby on the others of an elastic run); phases, trace and system samples
/// on every rank. Throws Error naming the path when the directory or a file cannot be created. The system sampler's
/// thread starts here and stops at fit end (or when the last reference is dropped).
std::vector<std::shared_ptr<TrainerCallback>> makeMonitorCallbacks(const MonitorOptions& options);

/// Where monitor.dir points when it is empty: runs/<stem of configFile>
/// (runs/default when there is no config file).
std::string defaultRunDir(const std::string& configFile);
/// True for the monitor.dir values that turn monitoring off: off, none, false.
bool monitorDisabled(const std::string& dir);

}  // namespace lockstep

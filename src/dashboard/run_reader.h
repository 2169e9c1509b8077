// run_reader.h — reads the run directories that the monitor layer writes.
//
// A log directory holds one subdirectory per run (docs/dashboard.md):
//   <run>/run.json                 {"name","start_time","updated_time","world_size","hostname",
//                                   "status","total_steps","step","global_batch"}
//   <run>/config.yaml              the resolved config text
//   <run>/metrics.jsonl            {"kind":"train",...} and {"kind":"val",...} lines
//   <run>/system/rank<R>.jsonl     per-worker CPU, memory (and GPU) samples
//   <run>/phases/rank<R>.jsonl     per-step phase times
//   <run>/timeline/rank<R>.trace.json   Chrome traces (listed, served as files)
//
// Contract:
// - The JSON-lines files are read as dashboard/jsonl_file.h states: incrementally,
//   a last line without its '\n' skipped until complete, a malformed line thrown
//   as RunFormatError with its file and line. Lines of another "kind" than
//   train/val in metrics.jsonl are ignored (newer writers).
// - Nothing here is thread-safe; the server serialises access to a LogDir.
// - The dashboard only reads; it never writes into a log directory.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dashboard/jsonl_file.h"
#include "lockstep/common/error.h"

namespace lockstep::dashboard {

/// A run name that is not a run of this log directory (HTTP 404).
class RunNotFound : public Error {
 public:
  using Error::Error;
};

/// The record kinds of the run-directory format (docs/dashboard.md).
std::vector<FieldSpec> trainFields();
std::vector<FieldSpec> valFields();
std::vector<FieldSpec> systemFields();
std::vector<FieldSpec> phaseFields();

/// One run directory, re-read incrementally by refresh().
class RunReader {
 public:
  /// `dir` must be a directory holding run.json (throws RunNotFound otherwise).
  /// `name` is how the run is called in errors and JSON (its directory name).
  RunReader(std::string dir, std::string name);

  /// Re-reads run.json and config.yaml and the appended lines of every JSON-lines
  /// file; rank files that appeared since are picked up. Throws RunFormatError.
  void refresh();

  const std::string& name() const { return name_; }
  const std::string& dir() const { return dir_; }
  /// run.json as read by the last refresh().
  const nlohmann::json& info() const { return info_; }
  /// The ranks that have a timeline/rank<R>.trace.json, ascending.
  std::vector<int> timelineRanks() const;
  /// Everything the page draws: {"name","run","config","train","val","system":[...],
  /// "phases":[...],"timelines":[...]} (docs/dashboard.md, "The JSON API").
  nlohmann::json toJson() const;

 private:
  void refreshRankFiles(const std::string& subdir, std::map<int, std::unique_ptr<JsonlFile>>& files,
                        std::vector<FieldSpec> (*fields)());

  std::string dir_;
  std::string name_;
  nlohmann::json info_;
  std::string config_;
  std::unique_ptr<JsonlFile> metrics_;
  std::map<int, std::unique_ptr<JsonlFile>> system_;
  std::map<int, std::unique_ptr<JsonlFile>> phases_;
};

/// Reads run.json of `runDir`; throws RunFormatError (naming `displayName`) when it
/// is not a JSON object or a known field has the wrong type.
nlohmann::json readRunInfo(const std::string& runDir, const std::string& displayName);

/// True when `name` can only mean a direct subdirectory: not empty, no '/' or '\\',
/// not "." or "..", not hidden, no control characters, at most 255 bytes.
bool isValidRunName(const std::string& name);

/// A log directory: one subdirectory per run.
class LogDir {
 public:
  /// Throws Error naming the path when it does not exist or is not a directory.
  explicit LogDir(std::string path);
  const std::string& path() const { return path_; }

  /// Names of the direct subdirectories that hold run.json, sorted.
  std::vector<std::string> runNames() const;
  /// {"logdir": path, "runs": [{"name", "run": run.json} or {"name", "error"}]},
  /// runs sorted by updated_time, newest first.
  nlohmann::json listRuns() const;
  /// The refreshed reader of run `name`. Throws RunNotFound for names that are
  /// invalid or not a run here, RunFormatError for malformed files.
  RunReader& run(const std::string& name);

 private:
  std::string path_;
  std::map<std::string, std::unique_ptr<RunReader>> runs_;
};

}  // namespace lockstep::dashboard

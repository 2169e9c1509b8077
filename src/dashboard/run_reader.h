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
// - Files grow while a run is live. A last line without its '\n' is still being
//   written: it is skipped silently and read once it is complete.
// - A complete line that is not a JSON object with the expected numeric fields
//   throws RunFormatError naming the file and the 1-based line number. Lines of
//   another "kind" than train/val in metrics.jsonl are ignored (newer writers).
// - JSON-lines files are read incrementally: refresh() parses only the bytes
//   appended since the last refresh, so polling a 10k-line file stays linear.
//   A file that shrank or was replaced is read again from its start.
// - Nothing here is thread-safe; the server serialises access to a LogDir.
// - The dashboard only reads; it never writes into a log directory.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/common/error.h"

namespace lockstep::dashboard {

/// A malformed file in a run directory: "<file>:<line>: <problem>".
class RunFormatError : public Error {
 public:
  /// `line` is 1-based; 0 when the problem is the whole file (unreadable).
  RunFormatError(std::string file, int64_t line, const std::string& problem);
  const std::string& file() const { return file_; }
  int64_t line() const { return line_; }

 private:
  std::string file_;
  int64_t line_;
};

/// A run name that is not a run of this log directory (HTTP 404).
class RunNotFound : public Error {
 public:
  using Error::Error;
};

/// One numeric field of a record kind. A `required` field must be present; it
/// may be null (a NaN loss is written as null) unless `nullable` is false.
struct FieldSpec {
  std::string name;
  bool required = false;
  bool nullable = true;
};

/// Records of one kind stored column by column; NaN where a record lacks an optional field.
struct Columns {
  std::vector<FieldSpec> fields;
  std::vector<std::vector<double>> values;  ///< values[i] is the column of fields[i]

  explicit Columns(std::vector<FieldSpec> specs);
  size_t rows() const { return values.empty() ? 0 : values[0].size(); }
  void clear();
  /// {"field": [v, ...], ...}; NaN becomes null; optional columns that are all NaN are left out.
  nlohmann::json toJson() const;
};

/// A JSON-lines file read incrementally into one Columns per record kind.
class JsonlFile {
 public:
  /// `kindField` empty: every line is one record of tables[0]. Otherwise a line's
  /// `kindField` value picks the table by `kinds` (same order as `tables`).
  JsonlFile(std::string path, std::string displayName, std::vector<Columns> tables, std::string kindField = {},
            std::vector<std::string> kinds = {});

  /// Parses the complete lines appended since the last call; throws RunFormatError
  /// at the first malformed one (the lines before it are kept, the next call
  /// reports the same line again). A missing file reads as empty.
  void refresh();
  const Columns& table(size_t i) const { return tables_.at(i); }
  int64_t linesRead() const { return line_; }

 private:
  void reset();
  void parseLine(const char* begin, const char* end);

  std::string path_;
  std::string displayName_;
  std::vector<Columns> tables_;
  std::string kindField_;
  std::vector<std::string> kinds_;
  uint64_t offset_ = 0;  ///< bytes consumed: always just after a '\n'
  int64_t line_ = 0;     ///< complete lines consumed
  dev_t device_ = 0;
  ino_t inode_ = 0;
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

// jsonl_file.h — JSON-lines files read incrementally into numeric columns, for the dashboard.
//
// Contract:
// - Files grow while a run is live. A last line without its '\n' is still being
//   written: it is skipped silently and read once it is complete.
// - A complete line that is not a JSON object with the expected numeric fields
//   throws RunFormatError naming the file and the 1-based line number. Lines of
//   a kind the reader was not given are ignored (newer writers).
// - JSON-lines files are read incrementally: refresh() parses only the bytes
//   appended since the last refresh, so polling a 10k-line file stays linear.
//   A file that shrank or was replaced is read again from its start.
// - Nothing here is thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
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

/// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is what a user needs.
/// run_reader.cpp uses it for run.json too. Not in a `detail` namespace: inside lockstep::dashboard that
/// would hide lockstep::detail, which the dashboard's files use.
std::string shortJsonMessage(const std::string& what);

}  // namespace lockstep::dashboard

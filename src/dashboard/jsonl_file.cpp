// jsonl_file.cpp — JSON-lines files read incrementally into numeric columns (jsonl_file.h).
#include "dashboard/jsonl_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

namespace lockstep::dashboard {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string location(const std::string& file, int64_t line) {
  return line > 0 ? fmt::format("{}:{}", file, line) : file;
}

}  // namespace

std::string shortJsonMessage(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

RunFormatError::RunFormatError(std::string file, int64_t line, const std::string& problem)
    : Error(location(file, line) + ": " + problem), file_(std::move(file)), line_(line) {}

// ---- Columns ------------------------------------------------------------------

Columns::Columns(std::vector<FieldSpec> specs) : fields(std::move(specs)), values(fields.size()) {}

void Columns::clear() {
  for (auto& column : values) column.clear();
}

nlohmann::json Columns::toJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& column = values[i];
    bool allMissing = std::all_of(column.begin(), column.end(), [](double v) { return std::isnan(v); });
    if (allMissing && !fields[i].required) continue;
    nlohmann::json array = nlohmann::json::array();
    array.get_ref<nlohmann::json::array_t&>().reserve(column.size());
    for (double v : column) {
      if (std::isnan(v))
        array.push_back(nullptr);
      else
        array.push_back(v);
    }
    out[fields[i].name] = std::move(array);
  }
  return out;
}

// ---- JsonlFile ------------------------------------------------------------------

JsonlFile::JsonlFile(std::string path, std::string displayName, std::vector<Columns> tables, std::string kindField,
                     std::vector<std::string> kinds)
    : path_(std::move(path)), displayName_(std::move(displayName)), tables_(std::move(tables)),
      kindField_(std::move(kindField)), kinds_(std::move(kinds)) {
  LOCKSTEP_ASSERT(!tables_.empty(), "JsonlFile needs a table");
  LOCKSTEP_ASSERT(kindField_.empty() || kinds_.size() == tables_.size(), "one kind per table");
}

void JsonlFile::reset() {
  for (auto& table : tables_) table.clear();
  offset_ = 0;
  line_ = 0;
}

void JsonlFile::refresh() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      reset();
      return;
    }
    throw RunFormatError(displayName_, 0, fmt::format("cannot read: {}", std::strerror(errno)));
  }
  if (st.st_dev != device_ || st.st_ino != inode_ || static_cast<uint64_t>(st.st_size) < offset_) {
    reset();  // a new file under the same name, or truncated: start over
    device_ = st.st_dev;
    inode_ = st.st_ino;
  }
  if (static_cast<uint64_t>(st.st_size) == offset_) return;

  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RunFormatError(displayName_, 0, fmt::format("cannot open: {}", std::strerror(errno)));
  std::string chunk(static_cast<size_t>(st.st_size) - offset_, '\0');
  size_t got = 0;
  while (got < chunk.size()) {
    ssize_t n = ::pread(fd, chunk.data() + got, chunk.size() - got, static_cast<off_t>(offset_ + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  chunk.resize(got);

  // Only complete lines: a last line without '\n' is still being written.
  size_t start = 0;
  for (size_t newline; (newline = chunk.find('\n', start)) != std::string::npos; start = newline + 1) {
    size_t end = newline;
    if (end > start && chunk[end - 1] == '\r') --end;
    parseLine(chunk.data() + start, chunk.data() + end);  // throws before consuming a bad line
    offset_ += newline + 1 - start;
    ++line_;
  }
}

void JsonlFile::parseLine(const char* begin, const char* end) {
  const int64_t lineNumber = line_ + 1;
  if (std::all_of(begin, end, [](char c) { return c == ' ' || c == '\t'; })) return;  // blank line
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(begin, end);
  } catch (const nlohmann::json::parse_error& e) {
    throw RunFormatError(displayName_, lineNumber, "not valid JSON: " + shortJsonMessage(e.what()));
  }
  if (!record.is_object()) {
    throw RunFormatError(displayName_, lineNumber, fmt::format("expected a JSON object, got {}", record.type_name()));
  }
  size_t tableIndex = 0;
  if (!kindField_.empty()) {
    auto kind = record.find(kindField_);
    if (kind == record.end() || !kind->is_string()) {
      throw RunFormatError(displayName_, lineNumber, fmt::format("expected a string field \"{}\"", kindField_));
    }
    auto found = std::find(kinds_.begin(), kinds_.end(), kind->get_ref<const std::string&>());
    if (found == kinds_.end()) return;  // a kind this dashboard does not draw
    tableIndex = static_cast<size_t>(found - kinds_.begin());
  }
  Columns& table = tables_[tableIndex];
  // Validate the whole record before appending, so the columns stay the same length.
  std::vector<double> row(table.fields.size(), kNaN);
  for (size_t i = 0; i < table.fields.size(); ++i) {
    const FieldSpec& spec = table.fields[i];
    auto field = record.find(spec.name);
    if (field == record.end() || field->is_null()) {
      if (spec.required && (field == record.end() || !spec.nullable)) {
        std::string kind = kindField_.empty() ? "a record" : "a \"" + kinds_[tableIndex] + "\" record";
        throw RunFormatError(displayName_, lineNumber, fmt::format("{} needs the number \"{}\"", kind, spec.name));
      }
      continue;
    }
    if (!field->is_number()) {
      throw RunFormatError(displayName_, lineNumber,
                           fmt::format("field \"{}\" is {}, expected a number", spec.name, field->type_name()));
    }
    row[i] = field->get<double>();
  }
  for (size_t i = 0; i < row.size(); ++i) table.values[i].push_back(row[i]);
}

}  // namespace lockstep::dashboard

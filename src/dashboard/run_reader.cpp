#include "dashboard/run_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

namespace lockstep::dashboard {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string location(const std::string& file, int64_t line) {
  return line > 0 ? fmt::format("{}:{}", file, line) : file;
}

/// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is what a user needs.
std::string shortJsonMessage(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

bool readWholeFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  out = buffer.str();
  return true;
}

/// The 1-based line of byte offset `byte` (1-based, as nlohmann reports it) in `text`.
int64_t lineOfByte(const std::string& text, size_t byte) {
  size_t end = std::min(text.size(), byte > 0 ? byte - 1 : 0);
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n');
}

}  // namespace

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

// ---- record kinds ---------------------------------------------------------------

std::vector<FieldSpec> trainFields() {
  return {{"step", true, false}, {"epoch"}, {"time"}, {"loss", true}, {"lr"}, {"samples_per_sec"}, {"step_time"}};
}

std::vector<FieldSpec> valFields() {
  return {{"step", true, false}, {"epoch"}, {"time"}, {"val_loss", true}, {"val_accuracy"}};
}

std::vector<FieldSpec> systemFields() {
  return {{"time", true, false}, {"cpu_percent", true}, {"rss_bytes", true},
          {"threads"},           {"gpu_util"},          {"gpu_mem_bytes"}};
}

std::vector<FieldSpec> phaseFields() {
  return {{"step", true, false}, {"time"},         {"data_wait_ms"},  {"forward_ms"}, {"backward_ms"},
          {"comm_wait_ms"},      {"optimizer_ms"}, {"step_ms", true}, {"comm_ms"},    {"buckets"}};
}

// ---- run.json -------------------------------------------------------------------

/// "memory" (written when a run finishes): per rank, byte counts (numbers, or null when not measured).
static void checkMemory(const nlohmann::json& info, const std::string& displayName) {
  auto it = info.find("memory");
  if (it == info.end()) return;
  if (!it->is_array()) {
    throw RunFormatError(displayName, 0, fmt::format("\"memory\" is {}, expected an array", it->type_name()));
  }
  for (size_t r = 0; r < it->size(); ++r) {
    const auto& rank = (*it)[r];
    if (!rank.is_object()) {
      throw RunFormatError(displayName, 0,
                           fmt::format("\"memory\"[{}] is {}, expected an object", r, rank.type_name()));
    }
    for (const auto& [key, value] : rank.items()) {
      if (!value.is_number() && !value.is_null()) {
        throw RunFormatError(displayName, 0,
                             fmt::format("\"memory\"[{}].{} is {}, expected a number", r, key, value.type_name()));
      }
    }
  }
}

/// "ps" (an async_ps run, once finished): {"staleness_bound": s, "staleness": [updates by staleness],
/// "wait_seconds": [per worker]}.
static void checkPs(const nlohmann::json& info, const std::string& displayName) {
  auto it = info.find("ps");
  if (it == info.end()) return;
  if (!it->is_object()) {
    throw RunFormatError(displayName, 0, fmt::format("\"ps\" is {}, expected an object", it->type_name()));
  }
  for (const char* key : {"staleness", "wait_seconds"}) {
    auto list = it->find(key);
    if (list == it->end()) continue;
    if (!list->is_array()) {
      throw RunFormatError(displayName, 0, fmt::format("\"ps\".{} is {}, expected an array", key, list->type_name()));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_number()) {
        throw RunFormatError(displayName, 0,
                             fmt::format("\"ps\".{}[{}] is {}, expected a number", key, i, (*list)[i].type_name()));
      }
    }
  }
}

nlohmann::json readRunInfo(const std::string& runDir, const std::string& displayName) {
  std::string path = runDir + "/run.json";
  std::string text;
  if (!readWholeFile(path, text)) {
    throw RunNotFound(fmt::format("{}: cannot read ({})", displayName, std::strerror(errno)));
  }
  nlohmann::json info;
  try {
    info = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw RunFormatError(displayName, lineOfByte(text, e.byte), "not valid JSON: " + shortJsonMessage(e.what()));
  }
  if (!info.is_object()) {
    throw RunFormatError(displayName, 0, fmt::format("expected a JSON object, got {}", info.type_name()));
  }
  for (const char* key : {"name", "hostname", "status"}) {
    auto it = info.find(key);
    if (it != info.end() && !it->is_string()) {
      throw RunFormatError(displayName, 0, fmt::format("\"{}\" is {}, expected a string", key, it->type_name()));
    }
  }
  for (const char* key : {"start_time", "updated_time", "world_size", "total_steps", "step", "global_batch"}) {
    auto it = info.find(key);
    if (it != info.end() && !it->is_number() && !it->is_null()) {
      throw RunFormatError(displayName, 0, fmt::format("\"{}\" is {}, expected a number", key, it->type_name()));
    }
  }
  checkMemory(info, displayName);
  checkPs(info, displayName);
  return info;
}

// ---- RunReader ------------------------------------------------------------------

RunReader::RunReader(std::string dir, std::string name) : dir_(std::move(dir)), name_(std::move(name)) {
  std::error_code ec;
  if (!fs::is_regular_file(dir_ + "/run.json", ec)) {
    throw RunNotFound(fmt::format("'{}' is not a run directory: it has no run.json", dir_));
  }
  std::vector<Columns> tables{Columns(trainFields()), Columns(valFields())};
  metrics_ = std::make_unique<JsonlFile>(dir_ + "/metrics.jsonl", name_ + "/metrics.jsonl", std::move(tables), "kind",
                                         std::vector<std::string>{"train", "val"});
}

void RunReader::refreshRankFiles(const std::string& subdir, std::map<int, std::unique_ptr<JsonlFile>>& files,
                                 std::vector<FieldSpec> (*fields)()) {
  static const std::regex kRankFile(R"(rank([0-9]{1,6})\.jsonl)");
  std::error_code ec;
  for (fs::directory_iterator it(dir_ + "/" + subdir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch match;
    std::string file = it->path().filename().string();
    if (!std::regex_match(file, match, kRankFile)) continue;
    int rank = std::stoi(match[1].str());
    if (files.count(rank) == 0) {
      std::vector<Columns> tables{Columns(fields())};
      files[rank] =
          std::make_unique<JsonlFile>(it->path().string(), name_ + "/" + subdir + "/" + file, std::move(tables));
    }
  }
  for (auto& [rank, file] : files) file->refresh();
}

void RunReader::refresh() {
  info_ = readRunInfo(dir_, name_ + "/run.json");
  if (!readWholeFile(dir_ + "/config.yaml", config_)) config_.clear();
  metrics_->refresh();
  refreshRankFiles("system", system_, &systemFields);
  refreshRankFiles("phases", phases_, &phaseFields);
}

std::vector<int> RunReader::timelineRanks() const {
  static const std::regex kTraceFile(R"(rank([0-9]{1,6})\.trace\.json)");
  std::vector<int> ranks;
  std::error_code ec;
  for (fs::directory_iterator it(dir_ + "/timeline", ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch match;
    std::string file = it->path().filename().string();
    if (std::regex_match(file, match, kTraceFile)) ranks.push_back(std::stoi(match[1].str()));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

nlohmann::json RunReader::toJson() const {
  nlohmann::json out;
  out["name"] = name_;
  out["run"] = info_;
  out["config"] = config_;
  out["train"] = metrics_->table(0).toJson();
  out["val"] = metrics_->table(1).toJson();
  auto perRank = [](const std::map<int, std::unique_ptr<JsonlFile>>& files) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [rank, file] : files) {
      if (file->table(0).rows() == 0) continue;
      nlohmann::json entry = file->table(0).toJson();
      entry["rank"] = rank;
      list.push_back(std::move(entry));
    }
    return list;
  };
  out["system"] = perRank(system_);
  out["phases"] = perRank(phases_);
  nlohmann::json timelines = nlohmann::json::array();
  for (int rank : timelineRanks()) {
    std::error_code ec;
    auto size = fs::file_size(fmt::format("{}/timeline/rank{}.trace.json", dir_, rank), ec);
    timelines.push_back({{"rank", rank}, {"bytes", ec ? 0 : size}});
  }
  out["timelines"] = std::move(timelines);
  return out;
}

// ---- LogDir ---------------------------------------------------------------------

bool isValidRunName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

LogDir::LogDir(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  auto status = fs::status(path_, ec);
  if (!fs::exists(status)) throw Error(fmt::format("log directory '{}' does not exist", path_));
  if (!fs::is_directory(status)) throw Error(fmt::format("log directory '{}' is not a directory", path_));
  if (fs::is_regular_file(path_ + "/run.json", ec)) {
    fs::path parent = fs::absolute(path_).lexically_normal();
    if (!parent.has_filename()) parent = parent.parent_path();  // "runs/tiny/" -> "runs/tiny"
    throw Error(
        fmt::format("'{}' is a run directory (it holds run.json), not a log directory of runs; "
                    "pass its parent: --logdir {}",
                    path_, parent.parent_path().string()));
  }
}

std::vector<std::string> LogDir::runNames() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code entryError;
    if (!isValidRunName(name) || !it->is_directory(entryError)) continue;
    if (fs::is_regular_file(it->path() / "run.json", entryError)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json LogDir::listRuns() const {
  nlohmann::json runs = nlohmann::json::array();
  std::vector<std::pair<double, nlohmann::json>> entries;
  for (const auto& name : runNames()) {
    nlohmann::json entry{{"name", name}};
    double updated = 0;
    try {
      entry["run"] = readRunInfo(path_ + "/" + name, name + "/run.json");
      const auto& run = entry["run"];
      if (run.contains("updated_time") && run["updated_time"].is_number()) updated = run["updated_time"].get<double>();
    } catch (const Error& e) { entry["error"] = e.what(); }
    entries.emplace_back(updated, std::move(entry));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [updated, entry] : entries) runs.push_back(std::move(entry));
  return {{"logdir", path_}, {"runs", std::move(runs)}};
}

RunReader& LogDir::run(const std::string& name) {
  std::string dir = path_ + "/" + name;
  std::error_code ec;
  if (!isValidRunName(name) || !fs::is_regular_file(dir + "/run.json", ec)) {
    runs_.erase(name);
    throw RunNotFound(fmt::format("no run '{}' in '{}'", name, path_));
  }
  auto& reader = runs_[name];
  if (!reader) reader = std::make_unique<RunReader>(dir, name);
  try {
    reader->refresh();
  } catch (const RunNotFound&) {
    runs_.erase(name);
    throw;
  }
  return *reader;
}

}  // namespace lockstep::dashboard

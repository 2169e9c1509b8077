#include "dashboard/run_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace lockstep::dashboard {

namespace fs = std::filesystem;

namespace {

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

// ---- record kinds ---------------------------------------------------------------

std::vector<FieldSpec> trainFields() {
  return {{"step", true, false}, {"epoch"}, {"time"}, {"loss", true}, {"lr"}, {"samples_per_sec"}, {"step_time"}};
}

std::vector<FieldSpec> valFields() {
  return {{"step", true, false}, {"epoch"}, {"time"}, {"val_loss", true}, {"val_accuracy"}};
}

std::vector<FieldSpec> systemFields() {
  return {{"time", true, false}, {"cpu_percent", true}, {"rss_bytes", true}, {"threads"},
          {"gpu_index"},         {"gpu_util"},          {"gpu_mem_bytes"},   {"gpu_mem_total_bytes"},
          {"gpu_power_watts"},   {"gpu_sm_clock_mhz"},  {"gpu_temp_c"}};
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

/// "generations" (an elastic run's): a list of objects whose fields are numbers.
static void checkGenerations(const nlohmann::json& info, const std::string& displayName) {
  auto it = info.find("generations");
  if (it == info.end()) return;
  if (!it->is_array()) {
    throw RunFormatError(displayName, 0, fmt::format("\"generations\" is {}, expected an array", it->type_name()));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& g = (*it)[i];
    if (!g.is_object()) {
      throw RunFormatError(displayName, 0,
                           fmt::format("\"generations\"[{}] is {}, expected an object", i, g.type_name()));
    }
    for (const auto& [key, value] : g.items()) {
      if (!value.is_number()) {
        throw RunFormatError(displayName, 0,
                             fmt::format("\"generations\"[{}].{} is {}, expected a number", i, key, value.type_name()));
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
  checkGenerations(info, displayName);
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

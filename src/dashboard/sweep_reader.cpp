// Reading a sweep's trials.jsonl (sweep_reader.h).
#include "dashboard/sweep_reader.h"

#include <filesystem>
#include <fstream>

#include "dashboard/run_reader.h"

namespace lockstep::dashboard {

std::optional<nlohmann::json> readSweep(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "trials.jsonl").string();
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json trials = nlohmann::json::array();
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json t = nlohmann::json::parse(line, nullptr, false);
    if (t.is_discarded() || !t.is_object()) throw RunFormatError(path, number, "not a JSON object");
    if (!t.contains("trial") || !t.contains("params") || !t["params"].is_object() || !t.contains("status")) {
      throw RunFormatError(path, number, "a trial needs \"trial\", \"params\" (an object) and \"status\"");
    }
    trials.push_back(std::move(t));
  }
  nlohmann::json sweep = {{"name", fs::absolute(dir).lexically_normal().filename().string()}, {"trials", trials}};
  if (fs::absolute(dir).lexically_normal().filename().empty()) {
    sweep["name"] = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  }
  sweep["metric"] = trials.empty() ? nlohmann::json(nullptr) : trials[0].value("metric", nlohmann::json(nullptr));
  sweep["mode"] = trials.empty() ? nlohmann::json(nullptr) : trials[0].value("mode", nlohmann::json(nullptr));
  return sweep;
}

}  // namespace lockstep::dashboard

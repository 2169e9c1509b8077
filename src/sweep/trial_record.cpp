// Trials as JSON lines, CSV and the best trial's config (trial_record.h).
#include "sweep/trial_record.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <fstream>

#include "lockstep/common/error.h"
#include "lockstep/train/config.h"

namespace lockstep::sweep {

namespace {

const std::vector<TrialStatus> kStatuses = {TrialStatus::kRunning, TrialStatus::kDone,   TrialStatus::kFailed,
                                            TrialStatus::kStopped, TrialStatus::kPaused, TrialStatus::kPruned};

nlohmann::json rungsJson(const SweepSpec& spec, const Trial& t) {
  nlohmann::json rungs = nlohmann::json::array();
  const auto resources = spec.asha.rungs();
  for (size_t i = 0; i < t.rungs.size() && i < resources.size(); ++i) {
    rungs.push_back({{"resource", resources[i]}, {"objective", t.rungs[i]}});
  }
  return rungs;
}

std::string rungsText(const SweepSpec& spec, const Trial& t) {
  std::string text;
  const auto resources = spec.asha.rungs();
  for (size_t i = 0; i < t.rungs.size() && i < resources.size(); ++i) {
    text += fmt::format("{}{}:{}", text.empty() ? "" : " ", resources[i], t.rungs[i]);
  }
  return text;
}

nlohmann::json paramsJson(const SearchSpace& space, const Point& point) {
  nlohmann::json params = nlohmann::json::object();
  for (size_t i = 0; i < space.params.size(); ++i) {
    const Param& p = space.params[i];
    if (p.kind == ParamKind::kChoice) {
      params[p.key] = space.valueText(i, point[i]);
    } else if (p.kind == ParamKind::kInt) {
      params[p.key] = static_cast<int64_t>(point[i]);
    } else {
      params[p.key] = point[i];
    }
  }
  return params;
}

nlohmann::json reported(double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json trialJson(const SweepSpec& spec, const Trial& t) {
  return {{"trial", t.index},
          {"name", t.name()},
          {"params", paramsJson(spec.space, t.point)},
          {"status", toString(t.status)},
          {"objective", t.measured() ? nlohmann::json(t.objective) : nlohmann::json(nullptr)},
          {"metric", toString(spec.metric)},
          {"mode", spec.maximize ? "max" : "min"},
          {"rungs", rungsJson(spec, t)},
          {"validation_loss", reported(t.validationLoss)},
          {"validation_accuracy", reported(t.validationAccuracy)},
          {"train_loss", reported(t.trainLoss)},
          {"steps", t.steps},
          {"epochs", reported(t.epochs)},
          {"seconds", t.seconds},
          {"exit_code", t.exitCode},
          {"error", t.error},
          {"command", t.command},
          {"slurm_job", t.job}};
}

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csvNumber(double v) { return v >= 0 ? fmt::format("{}", v) : ""; }

Trial trialFromJson(const SweepSpec& spec, const nlohmann::json& j) {
  Trial t;
  t.index = j.at("trial").get<int64_t>();
  std::string status = j.at("status").get<std::string>();
  bool known = false;
  for (auto s : kStatuses) {
    if (status == toString(s)) t.status = s, known = true;
  }
  if (!known) throw ConfigError(fmt::format("unknown status '{}'", status));
  std::vector<std::string> texts;
  const auto& params = j.at("params");
  for (const auto& p : spec.space.params) {
    if (!params.contains(p.key)) throw ConfigError(fmt::format("no value for {}", p.key));
    const auto& v = params.at(p.key);
    texts.push_back(v.is_string()           ? v.get<std::string>()
                    : v.is_number_integer() ? fmt::format("{}", v.get<int64_t>())
                                            : fmt::format("{}", v.get<double>()));
  }
  t.point = spec.space.parsePoint(texts);
  auto number = [&](const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : -1.0; };
  t.objective = j.at("objective").is_number() ? j["objective"].get<double>() : 0;
  if (j.contains("rungs")) {
    for (const auto& rung : j["rungs"]) t.rungs.push_back(rung.at("objective").get<double>());
  }
  t.validationLoss = number("validation_loss");
  t.validationAccuracy = number("validation_accuracy");
  t.trainLoss = number("train_loss");
  t.steps = j.value("steps", int64_t{0});
  t.epochs = number("epochs");
  t.seconds = j.value("seconds", 0.0);
  t.exitCode = j.value("exit_code", 0);
  t.error = j.value("error", std::string());
  t.command = j.value("command", std::string());
  t.job = j.value("slurm_job", std::string());
  return t;
}

}  // namespace

const char* toString(TrialStatus status) {
  switch (status) {
    case TrialStatus::kRunning: return "running";
    case TrialStatus::kDone: return "done";
    case TrialStatus::kFailed: return "failed";
    case TrialStatus::kStopped: return "stopped";
    case TrialStatus::kPaused: return "paused";
    case TrialStatus::kPruned: return "pruned";
  }
  return "?";
}

std::string Trial::name() const { return fmt::format("trial-{:04d}", index); }

bool better(const SweepSpec& spec, const Trial& a, const Trial& b) {
  if (a.rungs.size() != b.rungs.size()) return a.rungs.size() > b.rungs.size();
  return spec.maximize ? a.objective > b.objective : a.objective < b.objective;
}

std::string trialsJsonl(const SweepSpec& spec, const std::vector<Trial>& trials) {
  std::string text;
  for (const auto& t : trials) text += trialJson(spec, t).dump() + "\n";
  return text;
}

std::string trialsCsv(const SweepSpec& spec, const std::vector<Trial>& trials) {
  std::string text = "trial,status,objective";
  for (const auto& p : spec.space.params) text += "," + csvField(p.key);
  text += ",rungs,validation_loss,validation_accuracy,train_loss,steps,epochs,seconds,exit_code,error,command\n";
  for (const auto& t : trials) {
    text += fmt::format("{},{},{}", t.name(), toString(t.status), t.measured() ? fmt::format("{}", t.objective) : "");
    for (size_t i = 0; i < spec.space.params.size(); ++i) text += "," + csvField(spec.space.valueText(i, t.point[i]));
    text += fmt::format(",{},{},{},{},{},{},{:.3f},{},{},{}\n", rungsText(spec, t), csvNumber(t.validationLoss),
                        csvNumber(t.validationAccuracy), csvNumber(t.trainLoss), t.steps,
                        t.epochs >= 0 ? fmt::format("{:.3g}", t.epochs) : "", t.seconds, t.exitCode, csvField(t.error),
                        csvField(t.command));
  }
  return text;
}

std::vector<Trial> readTrialsJsonl(const SweepSpec& spec, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read it", path));
  std::vector<Trial> trials;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      Trial t = trialFromJson(spec, nlohmann::json::parse(line));
      if (t.index != static_cast<int64_t>(trials.size())) {
        throw ConfigError(fmt::format("expected trial {}, found {}", trials.size(), t.index));
      }
      trials.push_back(std::move(t));
    } catch (const ConfigError& e) {
      throw ConfigError(
          fmt::format("{}:{}: {} (was the spec changed since the sweep started?)", path, number, e.what()));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("{}:{}: not a trial record: {}", path, number, e.what()));
    }
  }
  return trials;
}

std::string bestYaml(const SweepSpec& spec, const Trial& best) {
  auto overrides = spec.overrides;
  for (const auto& o : spec.space.overrides(best.point)) overrides.push_back(o);
  if (spec.asha.enabled && !best.rungs.empty()) {  // the resource it was measured at
    overrides.push_back(fmt::format("{}={}", spec.asha.resourceKey(), spec.asha.rungs().at(best.rungs.size() - 1)));
  }
  std::string header = fmt::format("# best trial of the sweep {}: {}, {} {}\n# lockstep train best.yaml\n", spec.file,
                                   best.name(), toString(spec.metric), best.objective);
  return header + toYaml(loadTrainConfig(spec.base, overrides));
}

}  // namespace lockstep::sweep

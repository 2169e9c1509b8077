// Reading and checking a sweep spec (sweep_spec.h).
#include "sweep/sweep_spec.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>

#include "lockstep/common/error.h"
#include "lockstep/train/config.h"

namespace lockstep::sweep {

namespace {

/// Where a spec error is: "spec.yaml: space.optimizer.lr".
struct Reader {
  std::string file;

  ConfigError error(const std::string& key, const std::string& what) const {
    return ConfigError(fmt::format("{}: {}: {}", file, key, what));
  }
  static std::string text(const YAML::Node& node) {
    if (node.IsScalar()) return node.Scalar();
    YAML::Emitter out;
    out << YAML::Flow << node;
    return out.c_str();
  }
  double number(const YAML::Node& node, const std::string& key) const {
    double v = 0;
    if (!node || !node.IsScalar() || !YAML::convert<double>::decode(node, v) || !std::isfinite(v)) {
      throw error(key, fmt::format("expected a number, got '{}'", node ? text(node) : ""));
    }
    return v;
  }
  int64_t integer(const YAML::Node& node, const std::string& key, int64_t low, int64_t high) const {
    int64_t v = 0;
    if (!node || !node.IsScalar() || !YAML::convert<int64_t>::decode(node, v) || v < low || v > high) {
      throw error(key, fmt::format("expected an integer in [{}, {}], got '{}'", low, high, node ? text(node) : ""));
    }
    return v;
  }
  std::string word(const YAML::Node& node, const std::string& key, const std::vector<std::string>& allowed) const {
    std::string w = node && node.IsScalar() ? node.Scalar() : "";
    if (std::find(allowed.begin(), allowed.end(), w) == allowed.end()) {
      throw error(key, fmt::format("expected one of {}, got '{}'", fmt::join(allowed, " | "), node ? text(node) : ""));
    }
    return w;
  }
  void onlyKeys(const YAML::Node& map, const std::string& where, const std::vector<std::string>& allowed) const {
    if (!map.IsMap()) throw error(where, fmt::format("expected a mapping, got '{}'", text(map)));
    for (const auto& item : map) {
      std::string k = item.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        throw error(where.empty() ? k : where + "." + k,
                    fmt::format("unknown key (expected {})", fmt::join(allowed, ", ")));
      }
    }
  }
};

ParamKind parseKind(const Reader& r, const YAML::Node& node, const std::string& key) {
  std::string w = r.word(node, key, {"choice", "uniform", "loguniform", "int"});
  if (w == "choice") return ParamKind::kChoice;
  if (w == "uniform") return ParamKind::kUniform;
  if (w == "loguniform") return ParamKind::kLogUniform;
  return ParamKind::kInt;
}

Param parseParam(const Reader& r, const std::string& key, const YAML::Node& node) {
  const std::string where = "space." + key;
  Param p;
  p.key = key;
  if (node.IsSequence()) {  // shorthand: a list is a choice
    p.kind = ParamKind::kChoice;
    for (const auto& v : node) p.values.push_back(Reader::text(v));
  } else {
    r.onlyKeys(node, where, {"type", "values", "low", "high", "log", "points"});
    p.kind = parseKind(r, node["type"], where + ".type");
    if (p.kind == ParamKind::kChoice) {
      if (!node["values"] || !node["values"].IsSequence())
        throw r.error(where + ".values", "expected a list of values");
      for (const auto& v : node["values"]) p.values.push_back(Reader::text(v));
    } else {
      p.low = r.number(node["low"], where + ".low");
      p.high = r.number(node["high"], where + ".high");
      if (node["log"]) p.log = node["log"].as<std::string>() == "true";
      if (node["points"]) p.points = r.integer(node["points"], where + ".points", 1, 1000000);
    }
  }
  if (p.kind == ParamKind::kChoice) {
    if (p.values.empty()) throw r.error(where, "a choice needs at least one value");
    std::set<std::string> seen(p.values.begin(), p.values.end());
    if (seen.size() != p.values.size()) throw r.error(where, "a choice lists a value twice");
    return p;
  }
  if (!(p.low < p.high) && !(p.kind == ParamKind::kInt && p.low == p.high)) {
    throw r.error(where, fmt::format("empty or inverted range [{}, {}]: low must be below high", p.low, p.high));
  }
  if (p.kind == ParamKind::kInt && (p.low != std::floor(p.low) || p.high != std::floor(p.high))) {
    throw r.error(where, fmt::format("an int range needs integer bounds, got [{}, {}]", p.low, p.high));
  }
  if (p.logScale() && p.low <= 0) {
    throw r.error(where, fmt::format("a log-scale range needs low > 0, got [{}, {}]", p.low, p.high));
  }
  return p;
}

Metric parseMetric(const Reader& r, const YAML::Node& node) {
  std::string w = r.word(node, "objective.metric", {"validation_loss", "validation_accuracy", "train_loss"});
  if (w == "validation_accuracy") return Metric::kValidationAccuracy;
  return w == "train_loss" ? Metric::kTrainLoss : Metric::kValidationLoss;
}

Algorithm parseAlgorithm(const Reader& r, const YAML::Node& node) {
  std::string w = r.word(node, "algorithm", {"grid", "random", "tpe"});
  if (w == "grid") return Algorithm::kGrid;
  return w == "tpe" ? Algorithm::kTpe : Algorithm::kRandom;
}

std::vector<std::string> parseOverrides(const Reader& r, const YAML::Node& node) {
  std::vector<std::string> out;
  if (!node) return out;
  if (!node.IsMap()) throw r.error("overrides", "expected a mapping of config keys to values");
  for (const auto& item : node) out.push_back(item.first.as<std::string>() + "=" + Reader::text(item.second));
  return out;
}

/// Every value a parameter can take must be accepted by the base config (a type error surfaces
/// now, not in trial 7).
void checkAgainstBase(const Reader& r, const SweepSpec& spec, const TrainConfig& base) {
  const auto keys = trainConfigKeys();
  const auto& owned = sweepOwnedKeys();
  for (size_t i = 0; i < spec.space.params.size(); ++i) {
    const Param& p = spec.space.params[i];
    const std::string where = "space." + p.key;
    if (std::find(keys.begin(), keys.end(), p.key) == keys.end()) {
      throw r.error(where, fmt::format("unknown config key (keys: {})", fmt::join(keys, ", ")));
    }
    if (std::find(owned.begin(), owned.end(), p.key) != owned.end()) {
      throw r.error(where, "the sweep sets this key for each trial itself");
    }
    std::vector<double> probes;
    if (p.kind == ParamKind::kChoice) {
      for (size_t v = 0; v < p.values.size(); ++v) probes.push_back(static_cast<double>(v));
    } else {
      probes = {p.low, p.high};
    }
    for (double v : probes) {
      auto overrides = spec.overrides;
      overrides.push_back(p.key + "=" + spec.space.valueText(i, v));
      try {
        loadTrainConfig(spec.base, overrides);
      } catch (const ConfigError& e) { throw r.error(where, e.what()); }
    }
  }
  if (spec.metric == Metric::kValidationAccuracy && base.data.dataset == "names") {
    throw r.error("objective.metric", "the names task reports no accuracy (use validation_loss or train_loss)");
  }
  if (spec.metric != Metric::kTrainLoss && !base.trainer.validate) {
    throw r.error("objective.metric",
                  fmt::format("{} needs trainer.validate: true in the base config", toString(spec.metric)));
  }
}

void parseBudget(const Reader& r, const YAML::Node& root, SweepSpec& spec) {
  if (const YAML::Node budget = root["budget"]) {
    r.onlyKeys(budget, "budget", {"trials", "seconds"});
    if (budget["trials"]) spec.trials = r.integer(budget["trials"], "budget.trials", 1, 1000000);
    if (budget["seconds"]) {
      spec.seconds = r.number(budget["seconds"], "budget.seconds");
      if (spec.seconds <= 0) throw r.error("budget.seconds", "expected a number of seconds above 0");
    }
  }
  if (spec.algorithm == Algorithm::kGrid) {
    int64_t grid = spec.gridSize();
    spec.trials = spec.trials == 0 ? grid : std::min(spec.trials, grid);
  } else if (spec.trials == 0 && spec.seconds == 0) {
    throw r.error("budget", "random and tpe sweeps need budget.trials or budget.seconds");
  }
}

void parseAsha(const Reader& r, const YAML::Node& node, const TrainConfig& base, SweepSpec& spec) {
  r.onlyKeys(node, "early_stop", {"type", "resource", "min_resource", "max_resource", "reduction_factor"});
  r.word(node["type"], "early_stop.type", {"asha"});
  AshaOptions& a = spec.asha;
  a.enabled = true;
  if (node["resource"]) a.epochs = r.word(node["resource"], "early_stop.resource", {"epochs", "steps"}) == "epochs";
  if (node["min_resource"]) a.minResource = r.integer(node["min_resource"], "early_stop.min_resource", 1, INT32_MAX);
  if (!node["max_resource"]) throw r.error("early_stop.max_resource", "missing: the resource a trial trains at most");
  a.maxResource = r.integer(node["max_resource"], "early_stop.max_resource", 1, INT32_MAX);
  if (node["reduction_factor"]) {
    a.reductionFactor = r.integer(node["reduction_factor"], "early_stop.reduction_factor", 2, 1000);
  }
  if (a.maxResource <= a.minResource) {
    throw r.error("early_stop",
                  fmt::format("max_resource ({}) must be above min_resource ({})", a.maxResource, a.minResource));
  }
  for (const auto& p : spec.space.params) {
    if (p.key == a.resourceKey()) throw r.error("space." + p.key, "early_stop sets this key for each rung");
  }
  if (a.epochs && base.trainer.maxSteps > 0) {
    throw r.error("early_stop.resource", fmt::format("epochs, but the base config's trainer.max_steps ({}) would end "
                                                     "trials first: set trainer.max_steps: 0 in overrides",
                                                     base.trainer.maxSteps));
  }
}

}  // namespace

std::vector<int64_t> AshaOptions::rungs() const {
  std::vector<int64_t> out;
  for (int64_t r = minResource; r < maxResource; r *= reductionFactor) out.push_back(r);
  out.push_back(maxResource);
  return out;
}

int64_t SweepSpec::gridSize() const {
  int64_t size = 1;
  for (const auto& p : space.params) {
    if (p.gridSize() <= 0) {
      throw ConfigError(
          fmt::format("{}: space.{}: grid search needs a choice, an int, or points: N on a range", file, p.key));
    }
    if (size > 1000000 / p.gridSize()) throw ConfigError(fmt::format("{}: the grid has over a million points", file));
    size *= p.gridSize();
  }
  return size;
}

SweepSpec loadSweepSpec(const std::string& path) {
  Reader r{path};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(fmt::format("{}: cannot read the sweep spec", path));
  } catch (const YAML::Exception& e) { throw ConfigError(fmt::format("{}: not valid YAML: {}", path, e.what())); }
  r.onlyKeys(root, "",
             {"base", "overrides", "space", "objective", "budget", "algorithm", "tpe", "seed", "workers_per_trial",
              "early_stop"});
  SweepSpec spec;
  spec.file = path;
  if (!root["base"] || !root["base"].IsScalar()) throw r.error("base", "expected the path of a lockstep train config");
  std::filesystem::path base = root["base"].Scalar();
  spec.base = base.is_absolute() ? base.string()
                                 : (std::filesystem::path(path).parent_path() / base).lexically_normal().string();
  if (!std::filesystem::is_regular_file(spec.base)) {
    throw r.error("base", fmt::format("no such config file {}", spec.base));
  }
  spec.overrides = parseOverrides(r, root["overrides"]);
  TrainConfig baseConfig;
  try {
    baseConfig = loadTrainConfig(spec.base, spec.overrides);
  } catch (const ConfigError& e) { throw r.error("base", e.what()); }
  const YAML::Node space = root["space"];
  if (!space || !space.IsMap() || space.size() == 0) throw r.error("space", "expected a mapping of config keys");
  for (const auto& item : space) spec.space.params.push_back(parseParam(r, item.first.as<std::string>(), item.second));
  const YAML::Node objective = root["objective"];
  if (!objective) throw r.error("objective", "missing (e.g. {metric: validation_loss, mode: min})");
  r.onlyKeys(objective, "objective", {"metric", "mode"});
  spec.metric = parseMetric(r, objective["metric"]);
  spec.maximize = r.word(objective["mode"], "objective.mode", {"min", "max"}) == "max";
  if (root["algorithm"]) spec.algorithm = parseAlgorithm(r, root["algorithm"]);
  if (const YAML::Node tpe = root["tpe"]) {
    r.onlyKeys(tpe, "tpe", {"startup_trials", "candidates", "gamma", "multivariate"});
    if (tpe["multivariate"])
      spec.tpe.multivariate = r.word(tpe["multivariate"], "tpe.multivariate", {"true", "false"}) == "true";
    if (tpe["startup_trials"])
      spec.tpe.startupTrials = r.integer(tpe["startup_trials"], "tpe.startup_trials", 1, 100000);
    if (tpe["candidates"]) spec.tpe.candidates = r.integer(tpe["candidates"], "tpe.candidates", 1, 100000);
    if (tpe["gamma"]) {
      spec.tpe.gamma = r.number(tpe["gamma"], "tpe.gamma");
      if (spec.tpe.gamma <= 0 || spec.tpe.gamma >= 1) throw r.error("tpe.gamma", "expected a share in (0, 1)");
    }
  }
  if (root["seed"]) spec.seed = static_cast<uint64_t>(r.integer(root["seed"], "seed", 0, INT64_MAX));
  if (root["workers_per_trial"]) {
    spec.workersPerTrial = r.integer(root["workers_per_trial"], "workers_per_trial", 1, 4096);
  }
  parseBudget(r, root, spec);
  checkAgainstBase(r, spec, baseConfig);
  if (root["early_stop"]) parseAsha(r, root["early_stop"], baseConfig, spec);
  return spec;
}

const char* toString(Metric metric) {
  switch (metric) {
    case Metric::kValidationLoss: return "validation_loss";
    case Metric::kValidationAccuracy: return "validation_accuracy";
    case Metric::kTrainLoss: return "train_loss";
  }
  return "?";
}

const char* toString(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kGrid: return "grid";
    case Algorithm::kRandom: return "random";
    case Algorithm::kTpe: return "tpe";
  }
  return "?";
}

const std::vector<std::string>& sweepOwnedKeys() {
  static const std::vector<std::string> keys = {"monitor.dir", "checkpoint.dir"};
  return keys;
}

}  // namespace lockstep::sweep

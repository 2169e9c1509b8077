#include "lockstep/train/config.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <variant>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/ddp/comm_hook.h"
#include "lockstep/optim/lr_scaling.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {

namespace {

/// A setting chosen from names (an enum): set() parses and throws ConfigError naming the key.
struct Choice {
  std::function<void(const std::string& text, const std::string& key)> set;
  std::function<std::string()> get;
};

template <typename E>
Choice choice(E* target, E (*parse)(const std::string&, const std::string&)) {
  return Choice{[target, parse](const std::string& text, const std::string& key) { *target = parse(text, key); },
                [target] { return std::string(toString(*target)); }};
}

/// strategy.type's value: a strategy, or async_ps, the schedule's old spelling, for one release.
void setStrategy(TrainerOptions& o, const std::string& text, const std::string& key) {
  if (text != "async_ps") {
    o.strategy = parseStrategyType(text, key);
    return;
  }
  log::warn(key + " async_ps is deprecated: async_ps is a schedule, write schedule.type async_ps");
  o.schedule = Schedule::kAsyncPs;
}

Choice strategyChoice(TrainerOptions& o) {
  auto set = [&o](const std::string& text, const std::string& key) { setStrategy(o, text, key); };
  auto get = [&o] { return std::string(toString(o.strategy)); };
  return Choice{set, get};
}

using Target = std::variant<int64_t*, int*, uint64_t*, double*, bool*, std::string*, std::vector<std::string>*,
                            std::vector<double>*, std::vector<int64_t>*, Choice>;

struct Field {
  std::string path;
  Target target;
};

std::vector<Field> fieldsOf(TrainConfig& c) {
  return {
      {"model.type", &c.model.type},
      {"model.hidden", &c.model.hidden},
      {"model.layers", &c.model.layers},
      {"model.window", &c.model.window},
      {"model.hidden_sizes", &c.model.hiddenSizes},
      {"model.checkpoint_segments", &c.model.checkpointSegments},
      {"data.dataset", &c.data.dataset},
      {"data.sources", &c.data.sources},
      {"data.csv_column", &c.data.csvColumn},
      {"data.validation_fraction", &c.data.validationFraction},
      {"data.root", &c.data.root},
      {"data.image_size", &c.data.imageSize},
      {"data.channels", &c.data.channels},
      {"data.bad_images", &c.data.badImages},
      {"data.num_workers", &c.trainer.loader.numWorkers},
      {"data.prefetch", &c.trainer.loader.prefetch},
      {"data.random_flip", &c.data.randomFlip},
      {"data.crop_padding", &c.data.cropPadding},
      {"data.mean", &c.data.mean},
      {"data.std", &c.data.std},
      {"trainer.epochs", &c.trainer.epochs},
      {"trainer.max_steps", &c.trainer.maxSteps},
      {"trainer.batch_size", &c.trainer.batchSize},
      {"trainer.accumulation", &c.trainer.accumulation},
      {"trainer.clip_grad_norm", &c.trainer.clipGradNorm},
      {"trainer.nan_policy", choice(&c.trainer.nanPolicy, parseNanPolicy)},
      {"trainer.seed", &c.trainer.seed},
      {"trainer.log_every", &c.trainer.logEvery},
      {"trainer.validate", &c.trainer.validate},
      {"trainer.sample_log", &c.trainer.sampleLog},
      {"optimizer.type", choice(&c.trainer.optimizer.type, parseOptimizerType)},
      {"optimizer.lr", &c.trainer.optimizer.lr},
      {"optimizer.momentum", &c.trainer.optimizer.momentum},
      {"optimizer.weight_decay", &c.trainer.optimizer.weightDecay},
      {"optimizer.beta1", &c.trainer.optimizer.beta1},
      {"optimizer.beta2", &c.trainer.optimizer.beta2},
      {"lr_scaling.rule", choice(&c.trainer.lrScaling.rule, parseLrScalingRule)},
      {"lr_scaling.base_batch", &c.trainer.lrScaling.baseBatch},
      {"lr_scaling.warmup_steps", &c.trainer.lrScaling.warmupSteps},
      {"strategy.type", strategyChoice(c.trainer)},
      {"schedule.type", choice(&c.trainer.schedule, parseSchedule)},
      {"precision", choice(&c.trainer.precision, parsePrecision)},
      {"device", choice(&c.trainer.device, parseDeviceChoice)},
      {"parallel.pipeline", &c.trainer.pipeline.stages},
      {"parallel.microbatches", &c.trainer.pipeline.microbatches},
      {"parallel.schedule", choice(&c.trainer.pipeline.schedule, parsePipelineSchedule)},
      {"parallel.balance", &c.trainer.pipeline.balance},
      {"ps.servers", &c.trainer.ps.servers},
      {"ps.staleness", &c.trainer.ps.staleness},
      {"ps.compensation", &c.trainer.ps.compensation},
      {"ddp.bucket_cap_mb", &c.trainer.ddp.bucketCapMb},
      {"ddp.first_bucket_cap_mb", &c.trainer.ddp.firstBucketCapMb},
      {"ddp.find_unused_parameters", &c.trainer.ddp.findUnusedParameters},
      {"ddp.broadcast_buffers", &c.trainer.ddp.broadcastBuffers},
      {"ddp.compression", choice(&c.trainer.ddp.compression, parseGradCompression)},
      {"ddp.powersgd_rank", &c.trainer.ddp.powerSgd.rank},
      {"ddp.powersgd_start_step", &c.trainer.ddp.powerSgd.startStep},
      {"ddp.powersgd_min_compression_rate", &c.trainer.ddp.powerSgd.minCompressionRate},
      {"ddp.powersgd_error_feedback", &c.trainer.ddp.powerSgd.errorFeedback},
      {"ddp.powersgd_warm_start", &c.trainer.ddp.powerSgd.warmStart},
      {"checkpoint.dir", &c.trainer.checkpoint.dir},
      {"checkpoint.every", &c.trainer.checkpoint.every},
      {"checkpoint.keep_last", &c.trainer.checkpoint.keepLast},
      {"checkpoint.resume", &c.trainer.checkpoint.resume},
      {"generate.samples", &c.generate.samples},
      {"generate.temperature", &c.generate.temperature},
      {"monitor.dir", &c.monitor.dir},
      {"monitor.system_interval", &c.monitor.systemInterval},
      {"monitor.trace_steps", &c.monitor.traceSteps},
      {"monitor.progress", &c.monitor.progress},
      {"monitor.progress_interval", &c.monitor.progressInterval},
      {"testing.slow_rank", &c.testing.slowRank},
      {"testing.slow_factor", &c.testing.slowFactor},
      {"testing.inf_gradient_step", &c.testing.infGradientStep},
      {"testing.inf_gradient_rank", &c.testing.infGradientRank},
  };
}

std::string scalarText(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

void assign(const Field& field, const YAML::Node& node, const std::string& where) {
  auto fail = [&](const char* expected) {
    throw ConfigError(fmt::format("{}: key '{}' expects {}, got '{}'", where, field.path, expected, scalarText(node)));
  };
  if (const auto* c = std::get_if<Choice>(&field.target)) {
    if (!node.IsScalar()) fail("a single value");
    try {
      c->set(node.Scalar(), field.path);
    } catch (const ConfigError& e) { throw ConfigError(fmt::format("{}: {}", where, e.what())); }
    return;
  }
  std::visit(
      [&](auto target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, Choice>) {
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::vector<int64_t> values;
          int64_t v = 0;
          if (node.IsScalar()) {
            if (!YAML::convert<int64_t>::decode(node, v)) fail("a list of integers");
            values.push_back(v);
          } else if (node.IsSequence()) {
            for (const auto& item : node) {
              if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, v)) fail("a list of integers");
              values.push_back(v);
            }
          } else {
            fail("a list of integers");
          }
          *target = values;
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::vector<double> values;
          if (node.IsScalar()) {
            double v = 0;
            if (!YAML::convert<double>::decode(node, v)) fail("a list of numbers");
            values.push_back(v);
          } else if (node.IsSequence()) {
            for (const auto& item : node) {
              double v = 0;
              if (!item.IsScalar() || !YAML::convert<double>::decode(item, v)) fail("a list of numbers");
              values.push_back(v);
            }
          } else {
            fail("a list of numbers");
          }
          *target = values;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          if (node.IsScalar()) {
            *target = {node.Scalar()};
            return;
          }
          if (!node.IsSequence()) fail("a list of strings");
          std::vector<std::string> values;
          for (const auto& item : node) {
            if (!item.IsScalar()) fail("a list of strings");
            values.push_back(item.Scalar());
          }
          *target = values;
        } else {
          if (!node.IsScalar()) fail("a single value");
          T value{};
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) {
            if (!YAML::convert<T>::decode(node, value)) fail("an integer");
          } else if constexpr (std::is_same_v<T, uint64_t>) {
            if (!YAML::convert<T>::decode(node, value)) fail("a non-negative integer");
          } else if constexpr (std::is_same_v<T, double>) {
            if (!YAML::convert<double>::decode(node, value)) fail("a number");
          } else if constexpr (std::is_same_v<T, bool>) {
            if (!YAML::convert<bool>::decode(node, value)) fail("true or false");
          } else {
            value = node.Scalar();
          }
          *target = value;
        }
      },
      field.target);
}

std::string knownUnder(const std::vector<Field>& fields, const std::string& prefix) {
  std::string out;
  for (const auto& f : fields) {
    if (f.path.rfind(prefix, 0) == 0) out += (out.empty() ? "" : ", ") + f.path;
  }
  return out;
}

const Field* findField(const std::vector<Field>& fields, const std::string& path) {
  for (const auto& f : fields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

void applyNode(std::vector<Field>& fields, const YAML::Node& node, const std::string& prefix,
               const std::string& where) {
  for (const auto& item : node) {
    std::string key = item.first.Scalar();
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (const Field* f = findField(fields, path)) {
      assign(*f, item.second, where);
      continue;
    }
    bool isSection = !knownUnder(fields, path + ".").empty();
    if (isSection && item.second.IsMap()) {
      applyNode(fields, item.second, path, where);
      continue;
    }
    if (isSection) {
      throw ConfigError(fmt::format("{}: '{}' is a section; expected keys under it ({})", where, path,
                                    knownUnder(fields, path + ".")));
    }
    std::string section = prefix.empty() ? "" : prefix + ".";
    std::string known = knownUnder(fields, section);
    throw ConfigError(
        fmt::format("{}: unknown key '{}'{}", where, path, known.empty() ? "" : "; known keys here: " + known));
  }
}

void validate(const TrainConfig& c) {
  auto check = [](bool ok, const std::string& message) {
    if (!ok) throw ConfigError(message);
  };
  check(c.trainer.loader.numWorkers >= 0 && c.trainer.loader.prefetch >= 1,
        "data.num_workers must be >= 0 and data.prefetch >= 1");
  check(c.data.cropPadding >= 0 && c.data.imageSize >= 0, "data.crop_padding and data.image_size must not be negative");
  check(c.data.channels == 1 || c.data.channels == 3, "data.channels must be 1 or 3");
  check(c.data.badImages == "abort" || c.data.badImages == "skip", "data.bad_images must be abort or skip");
  check(c.model.hidden > 0 && c.model.layers > 0 && c.model.window > 0,
        "model.hidden, model.layers and model.window must be positive");
  check(!c.model.hiddenSizes.empty() &&
            std::all_of(c.model.hiddenSizes.begin(), c.model.hiddenSizes.end(), [](int64_t h) { return h > 0; }),
        fmt::format("model.hidden_sizes must be a non-empty list of positive integers, got [{}]",
                    fmt::join(c.model.hiddenSizes, ", ")));
  check(!c.data.sources.empty(), "data.sources must name at least one source");
  check(c.data.validationFraction >= 0 && c.data.validationFraction < 1, "data.validation_fraction must be in [0, 1)");
  check(c.trainer.epochs > 0 || c.trainer.maxSteps > 0, "trainer.epochs or trainer.max_steps must be positive");
  check(c.trainer.maxSteps >= 0, "trainer.max_steps must not be negative");
  check(c.trainer.batchSize > 0, fmt::format("trainer.batch_size must be positive, got {}", c.trainer.batchSize));
  check(c.trainer.accumulation > 0, "trainer.accumulation must be positive");
  check(c.trainer.pipeline.stages >= 1,
        fmt::format("parallel.pipeline must be at least 1 (pipeline stages), got {}", c.trainer.pipeline.stages));
  check(c.trainer.pipeline.microbatches >= 0,
        fmt::format("parallel.microbatches must be at least 1 (0: 4 x parallel.pipeline), got {}",
                    c.trainer.pipeline.microbatches));
  check(c.trainer.ps.servers >= 1, fmt::format("ps.servers must be at least 1, got {}", c.trainer.ps.servers));
  check(c.trainer.ps.compensation >= 0,
        fmt::format("ps.compensation must be 0 (off) or a positive lambda0, got {}", c.trainer.ps.compensation));
  check(c.trainer.ps.staleness >= 0,
        fmt::format("ps.staleness must be 0 (synchronous) or more, got {}", c.trainer.ps.staleness));
  check(c.testing.slowFactor >= 1, fmt::format("testing.slow_factor must be at least 1, got {}", c.testing.slowFactor));
  check(c.trainer.clipGradNorm >= 0, "trainer.clip_grad_norm must not be negative");
  check(c.trainer.logEvery > 0, "trainer.log_every must be positive");
  check(c.trainer.sampleLog.empty() || c.trainer.schedule == Schedule::kSync,
        "trainer.sample_log is written by the sync schedule's steps only, not under schedule.type async_ps");
  check(c.trainer.optimizer.lr > 0, "optimizer.lr must be positive");
  check(c.trainer.lrScaling.baseBatch >= 0 && c.trainer.lrScaling.warmupSteps >= 0,
        "lr_scaling.base_batch and lr_scaling.warmup_steps must not be negative");
  check(c.trainer.ddp.bucketCapMb > 0, "ddp.bucket_cap_mb must be positive");
  check(c.trainer.ddp.firstBucketCapMb > 0, "ddp.first_bucket_cap_mb must be positive");
  validatePowerSgdOptions(c.trainer.ddp.powerSgd);
  check(c.trainer.checkpoint.every >= 0, "checkpoint.every must not be negative");
  check(c.trainer.checkpoint.keepLast >= 1, "checkpoint.keep_last must be at least 1");
  check(c.generate.temperature > 0, "generate.temperature must be positive");
  check(c.monitor.systemInterval >= 0, "monitor.system_interval must not be negative (0 turns sampling off)");
  check(c.monitor.traceSteps >= -1, "monitor.trace_steps must be -1 (every step), 0 (no trace) or a step count");
  check(c.monitor.progress == "auto" || c.monitor.progress == "bar" || c.monitor.progress == "lines" ||
            c.monitor.progress == "off",
        "monitor.progress '" + c.monitor.progress + "' is unknown; expected auto, bar, lines or off");
  check(c.monitor.progressInterval > 0, "monitor.progress_interval must be positive");
}

}  // namespace

std::vector<std::string> trainConfigKeys() {
  TrainConfig c;
  std::vector<std::string> keys;
  for (const auto& f : fieldsOf(c)) keys.push_back(f.path);
  return keys;
}

TrainConfig loadTrainConfig(const std::string& file, const std::vector<std::string>& overrides) {
  TrainConfig config;
  auto fields = fieldsOf(config);
  if (!file.empty()) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(file);
    } catch (const YAML::BadFile&) {
      throw ConfigError(fmt::format("cannot read config file {}", file));
    } catch (const YAML::Exception& e) {
      throw ConfigError(
          fmt::format("{}: invalid YAML at line {}, column {}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
    if (!root.IsNull()) {
      if (!root.IsMap()) throw ConfigError(fmt::format("{}: expected a mapping of sections at the top", file));
      applyNode(fields, root, "", file);
    }
  }
  for (const auto& override : overrides) {
    auto eq = override.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(fmt::format("command line: override '{}' must look like key.path=value", override));
    }
    std::string path = override.substr(0, eq);
    const Field* f = findField(fields, path);
    if (!f) {
      auto dot = path.rfind('.');
      std::string known = knownUnder(fields, dot == std::string::npos ? "" : path.substr(0, dot + 1));
      throw ConfigError(
          fmt::format("command line: unknown key '{}'{}", path, known.empty() ? "" : "; known keys here: " + known));
    }
    YAML::Node value;
    try {
      value = YAML::Load(override.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("command line: value of '{}' is not valid YAML: {}", path, e.msg));
    }
    if (value.IsNull()) value = YAML::Node(override.substr(eq + 1));
    assign(*f, value, "command line");
  }
  validate(config);
  return config;
}

std::string toYaml(const TrainConfig& constConfig) {
  TrainConfig config = constConfig;
  YAML::Node root;
  for (const auto& f : fieldsOf(config)) {
    auto dot = f.path.find('.');
    std::string section = f.path.substr(0, dot);
    std::string key = dot == std::string::npos ? "" : f.path.substr(dot + 1);
    std::visit(
        [&](const auto& target) {
          // A top-level key (precision) has no section.
          YAML::Node node = key.empty() ? root[section] : root[section][key];
          if constexpr (std::is_same_v<std::decay_t<decltype(target)>, Choice>)
            node = target.get();
          else
            node = *target;
        },
        f.target);
  }
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

}  // namespace lockstep

#include "lockstep/optim/optimizer.h"

#include <ATen/core/Tensor.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <set>
#include <type_traits>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/common/tensor_text.h"
#include "lockstep/optim/fused_optimizers.h"

namespace lockstep {

namespace {

constexpr EnumName<OptimizerType> kOptimizerNames[] = {
    {OptimizerType::kSgd, "sgd"}, {OptimizerType::kAdam, "adam"}, {OptimizerType::kAdamW, "adamw"}};

template <typename Options>
void saveAdamOptions(const Options& o, TensorArchive& archive, const std::string& prefix) {
  archive.putDouble(prefix + "lr", o.lr());
  archive.putDouble(prefix + "beta1", std::get<0>(o.betas()));
  archive.putDouble(prefix + "beta2", std::get<1>(o.betas()));
  archive.putDouble(prefix + "eps", o.eps());
  archive.putDouble(prefix + "weight_decay", o.weight_decay());
  archive.putBool(prefix + "amsgrad", o.amsgrad());
}

template <typename State>
void saveAdamState(const State& s, TensorArchive& archive, const std::string& prefix) {
  archive.putInt(prefix + "step", s.step());
  archive.putTensor(prefix + "exp_avg", s.exp_avg());
  archive.putTensor(prefix + "exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) archive.putTensor(prefix + "max_exp_avg_sq", s.max_exp_avg_sq());
}

/// The concrete options or state type (const when `base` is).
template <typename T, typename Base>
auto& as(Base& base) {
  using Target = std::conditional_t<std::is_const_v<Base>, const T, T>;
  auto* p = dynamic_cast<Target*>(&base);
  LOCKSTEP_ASSERT(p != nullptr, "optimizer options or state of an unexpected type");
  return *p;
}

void saveGroupOptions(OptimizerType type, torch::optim::OptimizerOptions& options, TensorArchive& archive,
                      const std::string& prefix) {
  if (type == OptimizerType::kSgd) {
    const auto& o = as<torch::optim::SGDOptions>(options);
    archive.putDouble(prefix + "lr", o.lr());
    archive.putDouble(prefix + "momentum", o.momentum());
    archive.putDouble(prefix + "dampening", o.dampening());
    archive.putDouble(prefix + "weight_decay", o.weight_decay());
    archive.putBool(prefix + "nesterov", o.nesterov());
  } else if (type == OptimizerType::kAdam) {
    saveAdamOptions(as<torch::optim::AdamOptions>(options), archive, prefix);
  } else {
    saveAdamOptions(as<torch::optim::AdamWOptions>(options), archive, prefix);
  }
}

void saveParamState(OptimizerType type, const torch::optim::OptimizerParamState& state, TensorArchive& archive,
                    const std::string& prefix) {
  if (type == OptimizerType::kSgd) {
    const auto& s = as<torch::optim::SGDParamState>(state);
    if (s.momentum_buffer().defined()) archive.putTensor(prefix + "momentum_buffer", s.momentum_buffer());
  } else if (type == OptimizerType::kAdam) {
    saveAdamState(as<torch::optim::AdamParamState>(state), archive, prefix);
  } else {
    saveAdamState(as<torch::optim::AdamWParamState>(state), archive, prefix);
  }
}

/// Reads the optimizer entries of a checkpoint, checking each against the
/// parameter it belongs to, and remembers which entries it used.
class OptimizerReader {
 public:
  explicit OptimizerReader(const TensorArchive& archive) : archive_(archive) {}

  int64_t getInt(const std::string& key) {
    used_.insert(key);
    return archive_.getInt(key);
  }
  double getDouble(const std::string& key) {
    used_.insert(key);
    return archive_.getDouble(key);
  }
  bool getBool(const std::string& key) {
    used_.insert(key);
    return archive_.getBool(key);
  }
  const std::string& getString(const std::string& key) {
    used_.insert(key);
    return archive_.getString(key);
  }
  bool has(const std::string& key) const { return archive_.contains(key); }
  /// A state tensor of parameter `p`: same dtype and shape as the parameter.
  at::Tensor getLike(const std::string& key, const at::Tensor& p) {
    used_.insert(key);
    at::Tensor t = archive_.getTensor(key);
    if (t.scalar_type() != p.scalar_type() || !t.sizes().equals(p.sizes())) {
      throw CheckpointError(fmt::format("checkpoint {}: optimizer state '{}' is {} but its parameter is {}",
                                        archive_.label(), key, describeTensor(t), describeTensor(p)));
    }
    return t;
  }
  /// Throws unless every optimizer/ entry of the file was used.
  void checkAllUsed() const {
    for (const auto& key : archive_.keys("optimizer/")) {
      if (!used_.count(key)) {
        throw CheckpointError(
            fmt::format("checkpoint {} has an optimizer entry '{}' that this run's optimizer does "
                        "not have",
                        archive_.label(), key));
      }
    }
  }

 private:
  const TensorArchive& archive_;
  std::set<std::string> used_;
};

void warnIfChanged(bool report, const std::string& label, const std::string& option, double stored, double configured) {
  if (report && stored != configured) {
    log::warn(fmt::format("resuming with the optimizer's {} from {}: {} (this run's config says {})", option, label,
                          stored, configured));
  }
}

template <typename Options, typename State>
std::unique_ptr<torch::optim::OptimizerParamState> loadAdam(OptimizerReader& r, Options& stored,
                                                            const std::string& param, const at::Tensor& p) {
  auto s = std::make_unique<State>();
  int64_t step = r.getInt(param + "step");
  if (step < 0) throw CheckpointError(fmt::format("optimizer state '{}step' is negative ({})", param, step));
  s->step(step);
  s->exp_avg(r.getLike(param + "exp_avg", p));
  s->exp_avg_sq(r.getLike(param + "exp_avg_sq", p));
  if (r.has(param + "max_exp_avg_sq") || stored.amsgrad()) s->max_exp_avg_sq(r.getLike(param + "max_exp_avg_sq", p));
  return s;
}

template <typename Options>
void loadAdamOptions(OptimizerReader& r, Options& stored, const Options& configured, const std::string& prefix,
                     bool report, const std::string& label) {
  stored.lr(r.getDouble(prefix + "lr"));
  stored.betas({r.getDouble(prefix + "beta1"), r.getDouble(prefix + "beta2")});
  stored.eps(r.getDouble(prefix + "eps"));
  stored.weight_decay(r.getDouble(prefix + "weight_decay"));
  stored.amsgrad(r.getBool(prefix + "amsgrad"));
  warnIfChanged(report, label, "beta1", std::get<0>(stored.betas()), std::get<0>(configured.betas()));
  warnIfChanged(report, label, "beta2", std::get<1>(stored.betas()), std::get<1>(configured.betas()));
  warnIfChanged(report, label, "eps", stored.eps(), configured.eps());
  warnIfChanged(report, label, "weight_decay", stored.weight_decay(), configured.weight_decay());
  warnIfChanged(report, label, "amsgrad", stored.amsgrad(), configured.amsgrad());
}

/// The options of group `g` as stored, checked against the configured ones.
std::unique_ptr<torch::optim::OptimizerOptions> readGroupOptions(OptimizerType type, OptimizerReader& r,
                                                                 const torch::optim::OptimizerOptions& configured,
                                                                 const std::string& prefix, bool report,
                                                                 const std::string& label) {
  auto restored = configured.clone();
  if (type == OptimizerType::kSgd) {
    auto& o = as<torch::optim::SGDOptions>(*restored);
    const auto& c = as<torch::optim::SGDOptions>(configured);
    o.lr(r.getDouble(prefix + "lr"));
    o.momentum(r.getDouble(prefix + "momentum"));
    o.dampening(r.getDouble(prefix + "dampening"));
    o.weight_decay(r.getDouble(prefix + "weight_decay"));
    o.nesterov(r.getBool(prefix + "nesterov"));
    warnIfChanged(report, label, "momentum", o.momentum(), c.momentum());
    warnIfChanged(report, label, "dampening", o.dampening(), c.dampening());
    warnIfChanged(report, label, "weight_decay", o.weight_decay(), c.weight_decay());
    warnIfChanged(report, label, "nesterov", o.nesterov(), c.nesterov());
  } else if (type == OptimizerType::kAdam) {
    loadAdamOptions(r, as<torch::optim::AdamOptions>(*restored), as<torch::optim::AdamOptions>(configured), prefix,
                    report, label);
  } else {
    loadAdamOptions(r, as<torch::optim::AdamWOptions>(*restored), as<torch::optim::AdamWOptions>(configured), prefix,
                    report, label);
  }
  return restored;
}

/// The state of parameter `p` as stored (null when it had none).
std::unique_ptr<torch::optim::OptimizerParamState> readParamState(OptimizerType type, OptimizerReader& r,
                                                                  torch::optim::OptimizerOptions& restored,
                                                                  const std::string& prefix, const at::Tensor& p) {
  if (!r.getBool(prefix + "present")) return nullptr;
  if (type == OptimizerType::kSgd) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(r.getLike(prefix + "momentum_buffer", p));
    return s;
  }
  if (type == OptimizerType::kAdam) {
    return loadAdam<torch::optim::AdamOptions, torch::optim::AdamParamState>(r, as<torch::optim::AdamOptions>(restored),
                                                                             prefix, p);
  }
  return loadAdam<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      r, as<torch::optim::AdamWOptions>(restored), prefix, p);
}

}  // namespace

std::string optimizerParamPrefix(size_t index) { return fmt::format("optimizer/param{}/", index); }
std::string optimizerGroupPrefix(size_t index) { return fmt::format("optimizer/group{}/", index); }

const char* toString(OptimizerType type) { return enumName(kOptimizerNames, type); }

OptimizerType parseOptimizerType(const std::string& text, const std::string& what) {
  return parseEnum(kOptimizerNames, text, what);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const OptimizerOptions& o,
                                                       const std::vector<at::Tensor>& params) {
  switch (o.type) {
    case OptimizerType::kSgd:
      return std::make_unique<FusedSGD>(
          params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weightDecay));
    case OptimizerType::kAdam:
      return std::make_unique<FusedAdam>(
          params, torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weightDecay));
    case OptimizerType::kAdamW:
      return std::make_unique<FusedAdamW>(
          params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weightDecay));
  }
  LOCKSTEP_ASSERT(false, "unhandled optimizer type");
}

OptimizerType optimizerTypeOf(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return OptimizerType::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return OptimizerType::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return OptimizerType::kAdamW;
  throw Error(
      "lockstep checkpoints the state of torch::optim::SGD, Adam and AdamW; this optimizer is none of them "
      "(train without checkpoint.dir, or use one of those three)");
}

void* optimizerStateKey(const at::Tensor& param) { return param.unsafeGetTensorImpl(); }

int64_t optimizerStateBytes(torch::optim::Optimizer& optimizer) {
  const OptimizerType type = optimizerTypeOf(optimizer);
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  auto addAdam = [&](const auto& s) {
    add(s.exp_avg());
    add(s.exp_avg_sq());
    add(s.max_exp_avg_sq());
  };
  for (const auto& [key, state] : optimizer.state()) {
    if (type == OptimizerType::kSgd) {
      add(as<torch::optim::SGDParamState>(*state).momentum_buffer());
    } else if (type == OptimizerType::kAdam) {
      addAdam(as<torch::optim::AdamParamState>(*state));
    } else {
      addAdam(as<torch::optim::AdamWParamState>(*state));
    }
  }
  return bytes;
}

void saveOptimizerState(torch::optim::Optimizer& optimizer, TensorArchive& archive) {
  const OptimizerType type = optimizerTypeOf(optimizer);
  archive.putString("optimizer/type", toString(type));
  archive.putInt("optimizer/groups", static_cast<int64_t>(optimizer.param_groups().size()));
  int64_t index = 0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    const std::string prefix = optimizerGroupPrefix(g);
    archive.putInt(prefix + "params", static_cast<int64_t>(group.params().size()));
    saveGroupOptions(type, group.options(), archive, prefix);
    for (const auto& p : group.params()) {
      const std::string param = optimizerParamPrefix(index++);
      auto it = optimizer.state().find(optimizerStateKey(p));
      const bool present = it != optimizer.state().end();
      archive.putBool(param + "present", present);
      if (present) saveParamState(type, *it->second, archive, param);
    }
  }
}

void loadOptimizerState(torch::optim::Optimizer& optimizer, const TensorArchive& archive, bool report) {
  const std::string& label = archive.label();
  const OptimizerType type = optimizerTypeOf(optimizer);
  OptimizerReader r(archive);
  const std::string stored = r.getString("optimizer/type");
  if (stored != toString(type)) {
    throw CheckpointError(
        fmt::format("checkpoint {} holds {} optimizer state, but this run uses {}", label, stored, toString(type)));
  }
  auto& groups = optimizer.param_groups();
  int64_t groupCount = r.getInt("optimizer/groups");
  if (groupCount != static_cast<int64_t>(groups.size())) {
    throw CheckpointError(fmt::format("checkpoint {} has {} optimizer parameter groups, this run has {}", label,
                                      groupCount, groups.size()));
  }
  // Everything is read and checked before the optimizer changes.
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states;
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = optimizerGroupPrefix(g);
    int64_t params = r.getInt(prefix + "params");
    if (params != static_cast<int64_t>(groups[g].params().size())) {
      throw CheckpointError(fmt::format("checkpoint {}: optimizer group {} has {} parameters, this run's has {}", label,
                                        g, params, groups[g].params().size()));
    }
    options.push_back(readGroupOptions(type, r, groups[g].options(), prefix, report, label));
    for (const auto& p : groups[g].params()) {
      states.push_back(readParamState(type, r, *options.back(), optimizerParamPrefix(index++), p));
    }
  }
  r.checkAllUsed();
  index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_options(std::move(options[g]));
    for (const auto& p : groups[g].params()) {
      auto& state = states[index++];
      if (state)
        optimizer.state()[optimizerStateKey(p)] = std::move(state);
      else
        optimizer.state().erase(optimizerStateKey(p));
    }
  }
}

}  // namespace lockstep

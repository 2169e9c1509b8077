// A newcomer's fingerprint against the running job's (join_fingerprint.h).
#include "train/join_fingerprint.h"

#include <torch/nn/module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>
#include <vector>

#include "lockstep/common/error.h"

namespace lockstep::detail {

std::string joinFingerprint(const TrainerOptions& o, const torch::nn::Module& model, int64_t globalBatch,
                            int64_t trainingSamples, int64_t totalSteps) {
  std::string text = fmt::format("global batch {}\ntraining samples {}\nsteps {}\nseed {}\naccumulation {}\n",
                                 globalBatch, trainingSamples, totalSteps, o.seed, o.accumulation);
  const OptimizerOptions& opt = o.optimizer;
  text += fmt::format("optimizer {} lr {} momentum {} weight_decay {} betas {} {}\n", toString(opt.type), opt.lr,
                      opt.momentum, opt.weightDecay, opt.beta1, opt.beta2);
  for (const auto& p : model.named_parameters()) {
    text += fmt::format("parameter {} [{}]\n", p.key(), fmt::join(p.value().sizes(), ", "));
  }
  return text;
}

namespace {

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

void checkJoinFingerprint(const std::string& mine, const std::string& job) {
  const auto a = linesOf(mine), b = linesOf(job);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string here = i < a.size() ? a[i] : "(nothing)";
    const std::string there = i < b.size() ? b[i] : "(nothing)";
    if (here == there) continue;
    throw ConfigError(fmt::format(
        "this newcomer does not fit the running elastic job: the job has '{}', this worker '{}' (its config or "
        "model differs); it does not join, and the job goes on without it",
        there, here));
  }
}

}  // namespace lockstep::detail

// bench/sampler.cpp — `lockstep bench sampler --objective branin|hartmann6 --algorithm tpe|random
// [--trials N] [--seeds S] [--json]`: the sweep's samplers on standard synthetic objectives, in
// process (no training), so their search quality can be compared with other tools' on equal
// budgets (bench/sweep_quality.sh runs Optuna on the same functions).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "sweep/sampler.h"

namespace lockstep::cli {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Branin on [-5, 10] x [0, 15]; minimum 0.397887.
double branin(const std::vector<double>& x) {
  double a = x[1] - 5.1 / (4 * kPi * kPi) * x[0] * x[0] + 5 / kPi * x[0] - 6;
  return a * a + 10 * (1 - 1 / (8 * kPi)) * std::cos(x[0]) + 10;
}

/// Hartmann-6 on [0, 1]^6; minimum -3.32237.
double hartmann6(const std::vector<double>& x) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {
      {10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
    sum += alpha[i] * std::exp(-inner);
  }
  return -sum;
}

struct Objective {
  sweep::SearchSpace space;
  std::function<double(const std::vector<double>&)> f;
};

Objective objective(const std::string& name) {
  Objective o;
  auto add = [&](const std::string& key, double lo, double hi) {
    sweep::Param p;
    p.key = key;
    p.kind = sweep::ParamKind::kUniform;
    p.low = lo;
    p.high = hi;
    o.space.params.push_back(p);
  };
  if (name == "branin") {
    add("x", -5, 10);
    add("y", 0, 15);
    o.f = branin;
  } else {
    for (int i = 0; i < 6; ++i) add(fmt::format("x{}", i), 0, 1);
    o.f = hartmann6;
  }
  return o;
}

}  // namespace

int benchSampler(const std::vector<std::string>& args) {
  std::string name = "branin", algorithm = "tpe";
  int64_t trials = 50, seeds = 5;
  bool json = false, univariate = false;
  CLI::App app{"The sweep's samplers on synthetic objectives: best value per seed", "lockstep bench sampler"};
  app.add_option("--objective", name, "branin or hartmann6")->check(CLI::IsMember({"branin", "hartmann6"}));
  app.add_option("--algorithm", algorithm, "tpe or random")->check(CLI::IsMember({"tpe", "random"}));
  app.add_option("--trials", trials, "trials per seed (default 50)")->check(CLI::Range(int64_t(1), int64_t(100000)));
  app.add_option("--seeds", seeds, "seeds 0..S-1 (default 5)")->check(CLI::Range(int64_t(1), int64_t(10000)));
  app.add_flag("--json", json, "one JSON document");
  app.add_flag("--univariate", univariate, "TPE: every parameter on its own (tpe.multivariate: false)");
  if (auto exit = parseArgs(app, args, "bench sampler",
                            "usage: lockstep bench sampler [--objective branin|hartmann6] [--algorithm tpe|random] "
                            "[--trials N] [--seeds S] [--json]")) {
    return *exit;
  }
  Objective o = objective(name);
  std::vector<double> best;
  for (int64_t seed = 0; seed < seeds; ++seed) {
    std::vector<sweep::Observation> finished;
    double b = INFINITY;
    for (int64_t i = 0; i < trials; ++i) {
      sweep::TpeOptions tpe;
      tpe.multivariate = !univariate;
      auto p = algorithm == "tpe" ? sweep::tpePoint(o.space, tpe, static_cast<uint64_t>(seed), i, finished)
                                  : sweep::randomPoint(o.space, static_cast<uint64_t>(seed), i);
      double v = o.f(p);
      finished.push_back({p, v});
      b = std::min(b, v);
    }
    best.push_back(b);
  }
  if (json) {
    std::cout
        << nlohmann::json{{"objective", name}, {"algorithm", algorithm}, {"trials", trials}, {"best", best}}.dump()
        << "\n";
    return kExitOk;
  }
  auto sorted = best;
  std::sort(sorted.begin(), sorted.end());
  std::cout << fmt::format("{} {} {} trials x {} seeds: median best {:.5g} (min {:.5g}, max {:.5g})\n", algorithm, name,
                           trials, seeds, sorted[sorted.size() / 2], sorted.front(), sorted.back());
  return kExitOk;
}

}  // namespace lockstep::cli

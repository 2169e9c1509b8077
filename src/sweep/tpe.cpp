// The Tree-structured Parzen Estimator of sampler.h (tpePoint).
//
// Per parameter, independently (the univariate TPE):
//   - numeric parameters live in an internal space: the value, or its log for
//     log-scale parameters; an int's range is widened by half a step each side
//     so its end values are as likely as the others;
//   - a Parzen estimator is a mixture of one Gaussian per observation plus a
//     prior Gaussian (centre of the range, sigma = the range), all weighted
//     equally and truncated to the range; each observation's sigma is the larger
//     gap to its sorted neighbours, clipped to [range / min(100, n + 1), range]
//     (the "magic clip" of the original TPE, which keeps a few close points from
//     collapsing the density);
//   - a categorical parameter's estimator is the count of each value plus a
//     prior of one observation spread evenly over the values.
// Candidates are drawn from the good trials' estimator l; the one with the
// largest log l(x) - log g(x) wins.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "sweep/sampler.h"

namespace lockstep::sweep {

namespace {

constexpr double kPi = 3.14159265358979323846;

double normalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

struct Range {
  double lo, hi;
};

Range internalRange(const Param& p) {
  double lo = p.low, hi = p.high;
  if (p.kind == ParamKind::kInt) lo -= 0.5, hi += 0.5;
  if (p.logScale()) return {std::log(lo), std::log(hi)};
  return {lo, hi};
}

double toInternal(const Param& p, double v) { return p.logScale() ? std::log(v) : v; }

double fromInternal(const Param& p, double x) {
  double v = p.logScale() ? std::exp(x) : x;
  if (p.kind == ParamKind::kInt) v = std::clamp(std::round(v), p.low, p.high);
  return std::clamp(v, p.low, p.high);
}

/// A kernel's width at x: the larger gap to its neighbours among `sorted` (the observations and the
/// prior's centre; the outermost take the gap to their one neighbour, not to the range's end, which
/// would widen them towards the edges), clipped to [width / min(100, n + 1), width].
double neighbourSigma(const std::vector<double>& sorted, double x, double width) {
  const double minSigma = width / std::min(100.0, static_cast<double>(sorted.size()) + 1.0);
  size_t i = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
  double left = i > 0 ? x - sorted[i - 1] : 0;
  double right = i + 1 < sorted.size() ? sorted[i + 1] - x : 0;
  return std::clamp(std::max(left, right), minSigma, width);
}

/// A truncated Gaussian mixture over a range (equal weights).
struct Parzen {
  Range range;
  std::vector<double> mu, sigma, logZ;

  Parzen(Range r, const std::vector<double>& observations) : range(r) {
    const double width = r.hi - r.lo;
    std::vector<double> sorted = observations;
    sorted.push_back(0.5 * (r.lo + r.hi));  // the prior's centre takes part in the neighbour gaps
    std::sort(sorted.begin(), sorted.end());
    for (double x : observations) add(x, neighbourSigma(sorted, x, width));
    add(0.5 * (r.lo + r.hi), width);  // the prior
  }

  void add(double m, double s) {
    mu.push_back(m);
    sigma.push_back(s);
    logZ.push_back(std::log(std::max(normalCdf((range.hi - m) / s) - normalCdf((range.lo - m) / s), 1e-300)));
  }

  double logDensity(double x) const {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<double> terms;
    for (size_t i = 0; i < mu.size(); ++i) {
      double z = (x - mu[i]) / sigma[i];
      terms.push_back(-0.5 * z * z - std::log(sigma[i] * std::sqrt(2 * kPi)) - logZ[i]);
      best = std::max(best, terms.back());
    }
    double sum = 0;
    for (double t : terms) sum += std::exp(t - best);
    return best + std::log(sum / static_cast<double>(mu.size()));
  }

  double sample(std::mt19937_64& rng) const {
    std::uniform_int_distribution<size_t> pick(0, mu.size() - 1);
    size_t i = pick(rng);
    std::normal_distribution<double> normal(mu[i], sigma[i]);
    for (int tries = 0; tries < 100; ++tries) {
      double x = normal(rng);
      if (x >= range.lo && x <= range.hi) return x;
    }
    return std::uniform_real_distribution<double>(range.lo, range.hi)(rng);
  }
};

double numericValue(const Param& p, const std::vector<double>& good, const std::vector<double>& bad,
                    const TpeOptions& options, std::mt19937_64& rng) {
  const Range r = internalRange(p);
  auto internal = [&](const std::vector<double>& values) {
    std::vector<double> out;
    for (double v : values) out.push_back(toInternal(p, v));
    return out;
  };
  Parzen l(r, internal(good)), g(r, internal(bad));
  double bestX = 0, bestScore = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < options.candidates; ++c) {
    double x = l.sample(rng);
    double score = l.logDensity(x) - g.logDensity(x);
    if (score > bestScore) bestScore = score, bestX = x;
  }
  return fromInternal(p, bestX);
}

std::vector<double> categoricalWeights(size_t count, const std::vector<double>& observed) {
  std::vector<double> w(count, 1.0 / static_cast<double>(count));  // the prior: one observation spread evenly
  for (double v : observed) w[static_cast<size_t>(v)] += 1.0;
  double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= total;
  return w;
}

double categoricalValue(const Param& p, const std::vector<double>& good, const std::vector<double>& bad,
                        const TpeOptions& options, std::mt19937_64& rng) {
  auto l = categoricalWeights(p.values.size(), good);
  auto g = categoricalWeights(p.values.size(), bad);
  std::discrete_distribution<size_t> draw(l.begin(), l.end());
  size_t best = 0;
  double bestScore = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < options.candidates; ++c) {
    size_t k = draw(rng);
    double score = std::log(l[k]) - std::log(g[k]);
    if (score > bestScore) bestScore = score, best = k;
  }
  return static_cast<double>(best);
}

/// The multivariate TPE: one kernel per observation over all parameters at once (a product of
/// truncated Gaussians and, for choices, a categorical leaning to the observed value), so a
/// candidate keeps the combination of values its trial had. Each dimension's width is the
/// univariate one (neighbourSigma); the prior is one wide kernel.
struct JointParzen {
  const SearchSpace* space;
  std::vector<Range> ranges;
  std::vector<std::vector<double>> mu, sigma, logZ;      ///< [component][parameter]; choices: mu is the value's index
  std::vector<std::vector<std::vector<double>>> choice;  ///< [component][parameter] category probabilities

  JointParzen(const SearchSpace& s, const std::vector<Point>& observations) : space(&s) {
    const size_t n = observations.size(), d = s.params.size();
    std::vector<std::vector<double>> sorted(d);  // per numeric parameter: the observations and the prior's centre
    for (size_t k = 0; k < d; ++k) {
      const Param& p = s.params[k];
      ranges.push_back(p.kind == ParamKind::kChoice ? Range{0, 0} : internalRange(p));
      if (p.kind == ParamKind::kChoice) continue;
      for (const auto& o : observations) sorted[k].push_back(toInternal(p, o[k]));
      sorted[k].push_back(0.5 * (ranges[k].lo + ranges[k].hi));
      std::sort(sorted[k].begin(), sorted[k].end());
    }
    for (size_t j = 0; j <= n; ++j) {  // j == n: the prior
      std::vector<double> m(d), sg(d), lz(d);
      std::vector<std::vector<double>> c(d);
      for (size_t k = 0; k < d; ++k) {
        const Param& p = s.params[k];
        if (p.kind == ParamKind::kChoice) {
          const double count = static_cast<double>(p.values.size());
          c[k].assign(p.values.size(), j < n ? 1.0 / (static_cast<double>(n) + 1) : 1.0 / count);
          if (j < n) c[k][static_cast<size_t>(observations[j][k])] += 1.0;
          double total = std::accumulate(c[k].begin(), c[k].end(), 0.0);
          for (double& x : c[k]) x /= total;
          continue;
        }
        const Range r = ranges[k];
        const double width = r.hi - r.lo;
        m[k] = j < n ? toInternal(p, observations[j][k]) : 0.5 * (r.lo + r.hi);
        sg[k] = j < n ? neighbourSigma(sorted[k], m[k], width) : width;
        lz[k] = std::log(std::max(normalCdf((r.hi - m[k]) / sg[k]) - normalCdf((r.lo - m[k]) / sg[k]), 1e-300));
      }
      mu.push_back(m), sigma.push_back(sg), logZ.push_back(lz), choice.push_back(c);
    }
  }

  /// A candidate in internal units (choices: index).
  std::vector<double> sample(std::mt19937_64& rng) const {
    size_t j = std::uniform_int_distribution<size_t>(0, mu.size() - 1)(rng);
    std::vector<double> x(mu[j].size());
    for (size_t k = 0; k < x.size(); ++k) {
      if (!choice[j][k].empty()) {
        x[k] = static_cast<double>(std::discrete_distribution<size_t>(choice[j][k].begin(), choice[j][k].end())(rng));
        continue;
      }
      std::normal_distribution<double> normal(mu[j][k], sigma[j][k]);
      x[k] = std::uniform_real_distribution<double>(ranges[k].lo, ranges[k].hi)(rng);
      for (int tries = 0; tries < 100; ++tries) {
        double v = normal(rng);
        if (v >= ranges[k].lo && v <= ranges[k].hi) {
          x[k] = v;
          break;
        }
      }
    }
    return x;
  }

  double logDensity(const std::vector<double>& x) const {
    std::vector<double> terms;
    double best = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < mu.size(); ++j) {
      double t = 0;
      for (size_t k = 0; k < x.size(); ++k) {
        if (!choice[j][k].empty()) {
          t += std::log(choice[j][k][static_cast<size_t>(x[k])]);
          continue;
        }
        double z = (x[k] - mu[j][k]) / sigma[j][k];
        t += -0.5 * z * z - std::log(sigma[j][k] * std::sqrt(2 * kPi)) - logZ[j][k];
      }
      terms.push_back(t);
      best = std::max(best, t);
    }
    double sum = 0;
    for (double t : terms) sum += std::exp(t - best);
    return best + std::log(sum / static_cast<double>(terms.size()));
  }
};

Point jointPoint(const SearchSpace& space, const TpeOptions& options, const std::vector<Point>& good,
                 const std::vector<Point>& bad, std::mt19937_64& rng) {
  JointParzen l(space, good), g(space, bad);
  std::vector<double> bestX;
  double bestScore = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < options.candidates; ++c) {
    auto x = l.sample(rng);
    double score = l.logDensity(x) - g.logDensity(x);
    if (score > bestScore) bestScore = score, bestX = x;
  }
  Point point;
  for (size_t k = 0; k < space.params.size(); ++k) {
    const Param& p = space.params[k];
    point.push_back(p.kind == ParamKind::kChoice ? bestX[k] : fromInternal(p, bestX[k]));
  }
  return point;
}

}  // namespace

Point tpePoint(const SearchSpace& space, const TpeOptions& options, uint64_t seed, int64_t index,
               const std::vector<Observation>& finished) {
  if (static_cast<int64_t>(finished.size()) < options.startupTrials) return randomPoint(space, seed, index);
  std::vector<size_t> order(finished.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (finished[a].rungs != finished[b].rungs) return finished[a].rungs > finished[b].rungs;
    return finished[a].loss < finished[b].loss;
  });
  const double n = static_cast<double>(finished.size());
  const size_t goodCount = static_cast<size_t>(std::clamp(std::ceil(options.gamma * n), 1.0, std::min(25.0, n)));
  auto rng = trialRng(seed, index);
  if (options.multivariate) {
    std::vector<Point> good, bad;
    for (size_t j = 0; j < order.size(); ++j) (j < goodCount ? good : bad).push_back(finished[order[j]].point);
    return jointPoint(space, options, good, bad, rng);
  }
  Point point;
  for (size_t k = 0; k < space.params.size(); ++k) {
    std::vector<double> good, bad;
    for (size_t j = 0; j < order.size(); ++j) (j < goodCount ? good : bad).push_back(finished[order[j]].point.at(k));
    const Param& p = space.params[k];
    point.push_back(p.kind == ParamKind::kChoice ? categoricalValue(p, good, bad, options, rng)
                                                 : numericValue(p, good, bad, options, rng));
  }
  return point;
}

}  // namespace lockstep::sweep

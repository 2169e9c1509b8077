// The Tree-structured Parzen Estimator of sampler.h (tpePoint).
//
// The finished trials split into good and bad; a Parzen estimator l over the good and g over
// the bad; of `candidates` draws from l, the one with the largest log l(x) - log g(x) wins.
// An estimator is a mixture, weighted equally, of one kernel per observation and one prior
// kernel:
//   - numeric parameters live in an internal space: the value, or its log for log-scale
//     parameters; an int's range is widened by half a step each side so its end values are as
//     likely as the others. A kernel is a Gaussian truncated to the range, centred on the
//     observation; its sigma is the larger gap to its sorted neighbours (the observations and
//     the prior's centre), clipped to [range / min(100, n + 1), range] (the "magic clip" of the
//     original TPE, which keeps a few close points from collapsing the density). The prior is
//     centred on the range with sigma = the range;
//   - a choice's kernel puts 1 + 1/(n+1) on the observed value and 1/(n+1) on the others
//     (normalised); the prior's is uniform.
// Multivariate (the default): a kernel covers every parameter at once (a product over them), so
// a candidate keeps the combination of values its trial had. Univariate: the same estimator over
// each parameter alone, each parameter chosen on its own (Optuna's default TPE).
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

/// A Parzen estimator over the parameters of `s`: one kernel per observation over all of them at
/// once plus one wide prior kernel, weighted equally (see the file comment).
struct JointParzen {
  std::vector<Range> ranges;
  std::vector<std::vector<double>> mu, sigma, logZ;      ///< [component][parameter]; choices: mu is the value's index
  std::vector<std::vector<std::vector<double>>> choice;  ///< [component][parameter] category probabilities

  JointParzen(const SearchSpace& s, const std::vector<Point>& observations) {
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
  std::vector<Point> good, bad;
  for (size_t j = 0; j < order.size(); ++j) (j < goodCount ? good : bad).push_back(finished[order[j]].point);
  if (options.multivariate) return jointPoint(space, options, good, bad, rng);
  // Univariate: the same estimator over each parameter alone.
  auto column = [](const std::vector<Point>& points, size_t k) {
    std::vector<Point> out;
    for (const auto& p : points) out.push_back({p.at(k)});
    return out;
  };
  Point point;
  for (size_t k = 0; k < space.params.size(); ++k) {
    SearchSpace one;
    one.params.push_back(space.params[k]);
    point.push_back(jointPoint(one, options, column(good, k), column(bad, k), rng).at(0));
  }
  return point;
}

}  // namespace lockstep::sweep

// Grid and random search, and the sampler a spec asks for (sampler.h).
#include "sweep/sampler.h"

namespace lockstep::sweep {

Point gridPoint(const SearchSpace& space, int64_t index) {
  Point point(space.params.size());
  for (size_t k = space.params.size(); k-- > 0;) {
    const Param& p = space.params[k];
    point[k] = p.gridValue(index % p.gridSize());
    index /= p.gridSize();
  }
  return point;
}

Point randomPoint(const SearchSpace& space, uint64_t seed, int64_t index) {
  auto rng = trialRng(seed, index);
  Point point;
  for (const auto& p : space.params) point.push_back(p.sample(rng));
  return point;
}

namespace {

class SpecSampler : public Sampler {
 public:
  explicit SpecSampler(const SweepSpec& spec) : spec_(spec) {}
  Point suggest(int64_t index, const std::vector<Observation>& finished) override {
    switch (spec_.algorithm) {
      case Algorithm::kGrid: return gridPoint(spec_.space, index);
      case Algorithm::kRandom: return randomPoint(spec_.space, spec_.seed, index);
      case Algorithm::kTpe: return tpePoint(spec_.space, spec_.tpe, spec_.seed, index, finished);
    }
    return {};
  }

 private:
  SweepSpec spec_;
};

}  // namespace

std::unique_ptr<Sampler> makeSampler(const SweepSpec& spec) { return std::make_unique<SpecSampler>(spec); }

}  // namespace lockstep::sweep

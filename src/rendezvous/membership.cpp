// Generations of members through the store (lockstep/rendezvous/membership.h). Keys, under
// "membership/gen<g>/": "arrivals" (a counter), "entry/<i>" (arrival i: "<previous rank> <id>"),
// "closed" (the number of members), and the generation's communicator under "gloo/"; and
// "membership/current": the last generation closed, where a newcomer starts looking; and
// "membership/finished" once the job's work is done.
#include "lockstep/rendezvous/membership.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lockstep/comm/abandonable.h"
#include "lockstep/common/logging.h"

namespace lockstep {

namespace {

std::vector<uint8_t> bytesOf(const std::string& text) { return {text.begin(), text.end()}; }
std::string textOf(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

struct Entry {
  int previousRank = -1;
  std::string id;
  int64_t arrival = 0;
};

Entry parseEntry(const std::string& text, int64_t arrival, int64_t generation) {
  const size_t space = text.find(' ');
  Entry e;
  e.arrival = arrival;
  try {
    if (space == std::string::npos) throw std::invalid_argument("no space");
    e.previousRank = std::stoi(text.substr(0, space));
    e.id = text.substr(space + 1);
  } catch (const std::exception&) {
    throw Error(fmt::format("membership generation {}: arrival {} wrote '{}', expected '<previous rank> <id>'",
                            generation, arrival, text));
  }
  return e;
}

/// The workers the launcher says still run (kRunningMembersKey); `most` when it says nothing.
int64_t runningMembers(Store& store, int64_t most) {
  const auto running = store.tryGet(kRunningMembersKey);
  if (!running) return most;
  try {
    return std::min<int64_t>(most, std::stoll(textOf(*running)));
  } catch (const std::exception&) {
    return most;  // not a count: the window decides
  }
}

/// The first arrival's wait: until `most` arrived, or all the workers still running did, or the
/// window passed; returns the members.
int64_t closeWhenFull(Store& store, Store& gen, int64_t most, std::chrono::milliseconds window) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  int64_t arrived = gen.add("arrivals", 0);
  while (arrived < runningMembers(store, most) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    arrived = gen.add("arrivals", 0);
  }
  const int64_t members = std::min(arrived, most);
  gen.set("closed", bytesOf(std::to_string(members)));
  return members;
}

/// The members in rank order: the previous generation's by their rank there, then the newcomers
/// by arrival. Throws Error when two claim one previous rank.
std::vector<Entry> rankOrder(std::vector<Entry> entries, int64_t generation) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const bool aNew = a.previousRank < 0, bNew = b.previousRank < 0;
    if (aNew != bNew) return bNew;
    if (!aNew && a.previousRank != b.previousRank) return a.previousRank < b.previousRank;
    return a.arrival < b.arrival;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].previousRank >= 0 && entries[i].previousRank == entries[i - 1].previousRank) {
      throw Error(fmt::format("membership generation {}: '{}' and '{}' both say they were rank {} of generation {}",
                              generation, entries[i - 1].id, entries[i].id, entries[i].previousRank, generation - 1));
    }
  }
  return entries;
}

}  // namespace

std::optional<MembershipOptions> elasticMembershipOptions(const Environment& env) {
  const auto least = env.getInt(kMinMembersVar, 1, 1 << 20);
  if (!least) return std::nullopt;
  MembershipOptions o;
  o.minMembers = static_cast<int>(*least);
  o.maxMembers = static_cast<int>(env.getInt(kMaxMembersVar, 1, 1 << 20).value_or(o.maxMembers));
  if (o.maxMembers < o.minMembers) {
    throw ConfigError(fmt::format("{}={} is below {}={}: an elastic job needs a maximum of at least its minimum",
                                  kMaxMembersVar, o.maxMembers, kMinMembersVar, o.minMembers));
  }
  if (auto timeout = env.getSeconds(env::kCommTimeout)) o.gloo.timeout = *timeout;
  o.gloo.interface = env.get(env::kIface).value_or("");
  return o;
}

Membership::Membership(Store store, std::string id, int rank, MembershipOptions options)
    : store_(std::move(store)), id_(std::move(id)), rank_(rank), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.minMembers >= 1 && options_.maxMembers >= options_.minMembers,
                 "MembershipOptions: expected 1 <= minMembers <= maxMembers, got ", options_.minMembers, " and ",
                 options_.maxMembers);
  LOCKSTEP_CHECK(id_.find('\n') == std::string::npos && !id_.empty(),
                 "Membership: the member id must be one line, not '", id_, "'");
}

bool Membership::nextStarted() {
  return store_.tryGet(fmt::format("membership/gen{}/arrivals", generation_ + 1)).has_value();
}

void Membership::finish() { store_.set("membership/finished", bytesOf("1")); }

bool Membership::finished() { return store_.tryGet("membership/finished").has_value(); }

void Membership::leave() { store_.set(kLeftMemberKeyPrefix + std::to_string(::getpid()), bytesOf("1")); }

/// The generation this call joins: the next one; a member's first, the first (a launcher's rank)
/// or the one after the last closed (a newcomer).
int64_t Membership::target() {
  if (generation_ > 0 || rank_ >= 0) return generation_ + 1;
  const auto current = store_.tryGet("membership/current");
  return current ? std::stoll(textOf(*current)) + 1 : 1;
}

Generation Membership::next() {
  const int64_t g = generation_ = target();
  Store gen = store_.withPrefix(fmt::format("membership/gen{}", g));
  const int64_t arrival = gen.add("arrivals", 1) - 1;
  gen.set(fmt::format("entry/{}", arrival), bytesOf(fmt::format("{} {}", rank_, id_)));
  int64_t members = 0;
  if (arrival == 0) {
    members = closeWhenFull(store_, gen, options_.maxMembers, options_.joinWindow);
    store_.set("membership/current", bytesOf(std::to_string(g)));
  } else {
    members = std::stoll(textOf(gen.get("closed")));
  }
  if (arrival >= members) {
    rank_ = -1;  // no longer a member of any generation: a newcomer to the next
    throw LateMemberError(
        fmt::format("membership generation {} closed with {} member(s) before '{}' arrived; call "
                    "next() again to join generation {}",
                    g, members, id_, g + 1));
  }
  std::vector<Entry> entries;
  for (int64_t i = 0; i < members; ++i) {
    entries.push_back(parseEntry(textOf(gen.get(fmt::format("entry/{}", i))), i, g));
  }
  entries = rankOrder(std::move(entries), g);
  if (members < options_.minMembers) {
    throw Error(fmt::format("membership generation {}: {} member(s), fewer than the minimum of {}", g, members,
                            options_.minMembers));
  }
  Generation out;
  out.number = g;
  out.size = static_cast<int>(members);
  for (size_t r = 0; r < entries.size(); ++r) {
    out.previousRanks.push_back(entries[r].previousRank);
    if (entries[r].arrival == arrival) out.rank = static_cast<int>(r);
  }
  GlooOptions gloo = options_.gloo;
  gloo.rank = out.rank;
  gloo.worldSize = out.size;
  // A member still waiting on one that went on to the next generation gives this one up at once.
  const std::string nextArrivals = fmt::format("membership/gen{}/arrivals", g + 1);
  out.comm = withAbandonment(
      makeGlooCommunicator(gen.withPrefix("gloo"), gloo),
      [store = store_, nextArrivals]() mutable { return store.tryGet(nextArrivals).has_value(); },
      fmt::format("a member of generation {} went on to generation {}", g, g + 1));
  log::debug(fmt::format("membership generation {}: rank {} of {} (was {})", g, out.rank, out.size, rank_));
  rank_ = out.rank;
  return out;
}

}  // namespace lockstep

// lockstep/rendezvous/membership.h — who trains now: numbered generations of
// members that meet through the store, so that the survivors of a lost worker,
// and newcomers, form a communicator of the new size inside the running
// processes, reading no file and restarting nothing.
//
// Generation g is formed by whoever calls next() for it. A member calls it for
// the generation after its last; its first call is for generation 1 when it
// has a launcher's rank, and for the one after the last closed when it is a
// newcomer (a member late for a generation is a newcomer from then on).
//   1. each caller takes an arrival number from the store and writes its entry
//      (its rank in generation g-1, -1 for a newcomer, and its member id);
//   2. the first arrival closes g once options.maxMembers have arrived, or as
//      many as the store's kRunningMembersKey says still run (the launcher's
//      count), or options.joinWindow has passed since its own arrival,
//      whichever is first;
//      arrivals beyond the close belong to no generation: their next() throws
//      LateMemberError and they may call next() again, for g+1;
//   3. every member reads the closed generation's entries and takes its rank:
//      the members of g-1 first, in their order there (rank 0 stays rank 0
//      while it lives), then the newcomers in the order they arrived;
//   4. with fewer than options.minMembers every member's next() throws Error
//      naming both counts; otherwise every member connects a new Gloo
//      communicator over the store's keys of generation g.
// Nothing a generation wrote is rewritten, so a generation's keys describe it
// for as long as the store lives.
//
// Contract: the members of generation g-1 that are alive call next() (for
// example after a CommError from g-1's communicator) and no longer use g-1's
// communicator; a member leaving on purpose simply does not call it. Two
// entries claiming the same rank of g-1 are an Error naming that rank, on every
// member. One thread per Membership; its store may be shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep {

struct MembershipOptions {
  int minMembers = 1;                                             ///< a generation with fewer is an Error
  int maxMembers = 1 << 20;                                       ///< a generation closes at once with this many
  std::chrono::milliseconds joinWindow{std::chrono::seconds(5)};  ///< from the first arrival to the close
  GlooOptions gloo;  ///< the communicators' address and timeout (rank and worldSize are set per generation)
};

/// Where `lockstep run --min-np` keeps the number of its workers still running, updated as each
/// one exits: a generation closes once that many have arrived (the join window bounds the wait).
inline constexpr const char* kRunningMembersKey = "membership/running";
/// A worker that leaves the job before its end (SIGTERM, a preemption) sets this key followed by
/// its pid before it exits with code 0, so that the launcher refills its slot rather than taking
/// the exit for the job's end.
inline constexpr const char* kLeftMemberKeyPrefix = "membership/left/";

/// `lockstep run --min-np A --max-np B` tells its workers A and B in these variables.
inline constexpr const char* kMinMembersVar = "LOCKSTEP_MIN_NP";
inline constexpr const char* kMaxMembersVar = "LOCKSTEP_MAX_NP";
/// Set to 1 on a worker `lockstep run --min-np` starts into a running job (in a lost worker's
/// slot): it joins the members at their next generation instead of init()'s world.
inline constexpr const char* kNewcomerVar = "LOCKSTEP_ELASTIC_NEWCOMER";
/// The workers an elastic job started with (-np), told to every worker: a newcomer's own world
/// size is the most the job may hold.
inline constexpr const char* kStartMembersVar = "LOCKSTEP_START_NP";

/// The options of an elastic job's workers: minMembers and maxMembers from the launcher's
/// variables, the communicators' timeout (LOCKSTEP_COMM_TIMEOUT) and interface (LOCKSTEP_IFACE)
/// as init() reads them; nullopt when the job is not elastic (no LOCKSTEP_MIN_NP). ConfigError
/// naming the variable for a value that is not a count, or a maximum below the minimum.
std::optional<MembershipOptions> elasticMembershipOptions(const Environment& env);

/// next() of a member that arrived after its generation closed; call next() again.
class LateMemberError : public Error {
 public:
  using Error::Error;
};

/// One generation as a member sees it.
struct Generation {
  int64_t number = 0;
  int rank = 0;
  int size = 0;
  /// For each rank of this generation, its rank in the previous one (-1: a newcomer).
  std::vector<int> previousRanks;
  std::shared_ptr<Communicator> comm;
};

class Membership {
 public:
  /// `id` names this member in errors and logs (e.g. "host:pid"). `rank`: this member's rank in
  /// the generation before the first it joins (a launcher's rank), or -1 for a newcomer.
  Membership(Store store, std::string id, int rank, MembershipOptions options);

  /// Forms the next generation with whoever calls it (see the file comment); throws
  /// LateMemberError or Error as said there, CommError when the store or the connection fails.
  Generation next();
  /// The number of the last generation this member took part in or was late for (0 before any).
  int64_t generation() const { return generation_; }
  /// Whether anyone arrived at the generation after this member's (a newcomer waiting, or a member
  /// that went on after a failure): one store read.
  bool nextStarted();
  /// Says in the store that the job's work is done: no generation follows (finished() is true for
  /// every member). Any member may say it, more than once.
  void finish();
  bool finished();
  /// Says in the store that this process leaves the job before its end (kLeftMemberKeyPrefix).
  void leave();

 private:
  int64_t target();

  Store store_;
  std::string id_;
  int rank_;
  MembershipOptions options_;
  int64_t generation_ = 0;
};

}  // namespace lockstep

// elastic_checks.h — what an elastic Trainer run refuses, and its SIGTERM (lockstep/train/elastic.h).
// Private to train/.
#pragma once

#include <signal.h>

#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// While it lives, SIGTERM asks this process to leave the job (requested()) instead of ending it;
/// the handler it replaced comes back after. One at a time.
class LeaveOnSigterm {
 public:
  LeaveOnSigterm();
  ~LeaveOnSigterm();
  LeaveOnSigterm(const LeaveOnSigterm&) = delete;
  LeaveOnSigterm& operator=(const LeaveOnSigterm&) = delete;
  /// Whether SIGTERM arrived since construction.
  static bool requested();

 private:
  struct sigaction previous_ {};
};

/// ConfigError naming the first setting of `o` (its device resolved) an elastic run cannot recover.
void checkElasticOptions(const TrainerOptions& o);

}  // namespace lockstep::detail

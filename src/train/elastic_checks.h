// elastic_checks.h — what an elastic Trainer run refuses (lockstep/train/elastic.h). Private to train/.
#pragma once

#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// ConfigError naming the first setting of `o` (its device resolved) an elastic run cannot recover.
void checkElasticOptions(const TrainerOptions& o);

}  // namespace lockstep::detail

// validation.h — the pieces of a validation pass every fit() loop shares (fit_reports.cpp):
// which samples a rank evaluates, the sums over ranks, the log line. Private to train/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// Shard `rank` of `world` of a set of `size` samples (rank, rank + world, ...) in batches of `batchSize`.
std::vector<std::vector<int64_t>> validationPlan(int64_t size, int rank, int world, int64_t batchSize);
/// Collective: sums every rank's loss x rows, rows and right answers, and sets the result's
/// validation loss (and accuracy, when `withAccuracy`; -1 loss when no rows at all).
void reduceValidation(Communicator& comm, double sum, double count, double right, bool withAccuracy, FitResult& result);
/// "<when> validation loss 0.1234, accuracy 85.00%" (the accuracy when measured).
std::string validationLine(const std::string& when, const FitResult& result);

}  // namespace lockstep::detail

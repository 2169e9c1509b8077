// validation.h — the validation pass every fit() loop shares (fit_reports.cpp): which
// samples a rank evaluates, the pass over them, the sums over ranks, the log line. Private to train/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// Shard `rank` of `world` of a set of `size` samples (rank, rank + world, ...) in batches of `batchSize`.
std::vector<std::vector<int64_t>> validationPlan(int64_t size, int rank, int world, int64_t batchSize);
/// One validation pass's sums over a rank's part: loss x rows, rows, right answers.
struct ValidationSums {
  double loss = 0;
  double rows = 0;
  double right = 0;
  /// One batch as this rank's model answered it (nothing when it computed no output).
  void add(const Evaluation& e, const Batch& batch) {
    if (!e.computed) return;
    const auto n = static_cast<double>(batch.inputs.size(0));
    loss += e.meanLoss * n;
    right += static_cast<double>(e.correct);
    rows += n;
  }
};
/// Sums `evaluate` over the batches of shard `rank` of `world` of `data` (batches of o.batchSize): without autograd,
/// the model in eval mode (in train mode again after), under o.precision's autocast in one scope, so bf16 copies of the
/// weights are cast once for every batch.
ValidationSums sumValidation(torch::nn::Module& model, const Dataset& data, int rank, int world,
                             const TrainerOptions& o, const std::function<Evaluation(const Batch&)>& evaluate);
/// The loss and (with the model's accuracy function) right answers of the chain's `output` for `batch`.
Evaluation evaluateOutput(const LayeredModel& model, const at::Tensor& output, const Batch& batch);
/// Collective: sums every rank's sums and sets the result's validation loss (and accuracy, when
/// `withAccuracy`; -1 loss when no rows at all).
void reduceValidation(Communicator& comm, const ValidationSums& sums, bool withAccuracy, FitResult& result);
/// "<when> validation loss 0.1234, accuracy 85.00%" (the accuracy when measured).
std::string validationLine(const std::string& when, const FitResult& result);

}  // namespace lockstep::detail

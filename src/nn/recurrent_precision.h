// recurrent_precision.h — test seams of runRecurrentLayer (lockstep/nn/precision.h).
#pragma once

#include <optional>

namespace lockstep::detail {

/// Tests: answer cpuRunsBf16Recurrent() with `supported` instead of the probe (nullopt: the probe
/// again), so the float32 fallback runs on CPUs that have bf16 LSTM kernels too.
void overrideCpuBf16Recurrent(std::optional<bool> supported);
/// Recurrent layer calls run in float32 by the fallback in this process so far (the first one
/// logged the warning).
int bf16RecurrentFallbacks();

}  // namespace lockstep::detail

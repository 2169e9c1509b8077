// squares.h — the sum of the squares of floats in float64 that clipGradNorm
// (lockstep/optim/grad_clip.h) uses, portable and with AVX2, which give the
// same bits: element i goes to running sum i % 16 (the tail to sum 0), the
// sums are added up in one fixed order, and a float's square is exact in
// float64 (so a fused multiply-add rounds as the add alone).
#pragma once

#include <cstdint>

namespace lockstep::detail {

double squaresPortable(const float* x, int64_t n);
/// Needs hasAvx2() (the portable version where it is not built).
double squaresAvx2(const float* x, int64_t n);
bool hasAvx2();
/// squaresAvx2 where the CPU has AVX2 and FMA, else squaresPortable.
double squaresOf(const float* x, int64_t n);

}  // namespace lockstep::detail

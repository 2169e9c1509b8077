// common/vector_clones.h — LOCKSTEP_VECTOR_CLONES, internal to liblockstep.
//
// Put before a function with long elementwise loops: GCC on x86-64 then also
// compiles it for x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512), and the
// loader picks the clone the CPU runs (an ifunc); elsewhere it does nothing.
// The clones must compute the same bits as the baseline: write fused
// multiply-adds explicitly (std::fma) and keep the compiler from contracting
// others (-ffp-contract=off) where rounding matters.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LOCKSTEP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOCKSTEP_VECTOR_CLONES
#endif

// The row kernels of reluMaxPool2x2 (nn/pool_rows.h).
//
// Which element of a window wins is a coin toss on real data, so nothing here
// branches on it: selects are masks. On x86-64 four windows go at a time in
// SSE2 registers (every x86-64 CPU has them): the convnet's rows are 14 and 7
// outputs long, too short for the compiler's AVX-512 loops, which spent their
// time in the scalar remainder (-O3 made the bfloat16 forward twice as slow).
// Each kernel is also compiled for x86-64-v3 and -v4 (three-operand forms) and
// the CPU picks one when the library loads. The rest of a row, and other
// CPUs, take the scalar loop, which computes the same bits.
#include "nn/pool_rows.h"

#include <cmath>
#include <cstring>

#include "common/vector_clones.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define LOCKSTEP_POOL_SSE2 1
#endif

namespace lockstep::detail {

namespace {

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
/// All ones when `yes`, else zero.
inline uint32_t mask(bool yes) { return 0u - static_cast<uint32_t>(yes); }

/// One window of elements a (top left), b, c, d; returns ReLU of its maximum.
inline float windowForward(float a, float b, float c, float d, uint8_t* k) {
  const uint32_t second = b > a, fourth = d > c;
  const float top = b > a ? b : a, bottom = d > c ? d : c;
  const uint32_t lower = bottom > top;
  const float best = bottom > top ? bottom : top;
  *k = static_cast<uint8_t>(second + lower * (2 + fourth - second));
  return best > 0.0f ? best : 0.0f;
}

inline float widen(uint16_t bf16) { return fromBits(static_cast<uint32_t>(bf16) << 16); }

/// 0 + g (a -0 becomes +0; through float a NaN becomes 0x7FC0) on bfloat16's bits.
inline uint32_t plusZero(uint32_t u) {
  const bool nan = (u & 0x7FFFu) > 0x7F80u;
  return ((u & mask(u != 0x8000u)) & ~mask(nan)) | (0x7FC0u & mask(nan));
}

#ifdef LOCKSTEP_POOL_SSE2

/// Four windows at once: the maximum's ReLU (maxps returns its second operand on
/// ties, so _mm_max_ps(b, a) is `b > a ? b : a`, as windowForward), positions to
/// k[0..3]; returns nonzero when an element was NaN.
inline int forwardFour(__m128 a, __m128 b, __m128 c, __m128 d, __m128* relu, uint8_t* k) {
  const int nan = _mm_movemask_ps(_mm_or_ps(_mm_cmpunord_ps(a, b), _mm_cmpunord_ps(c, d)));
  const __m128 second = _mm_cmpgt_ps(b, a), fourth = _mm_cmpgt_ps(d, c);
  const __m128 top = _mm_max_ps(b, a), bottom = _mm_max_ps(d, c);
  const __m128 lower = _mm_cmpgt_ps(bottom, top);
  *relu = _mm_max_ps(_mm_max_ps(bottom, top), _mm_setzero_ps());
  // second + lower * (2 + fourth - second), lower being a mask
  const __m128i s = _mm_srli_epi32(_mm_castps_si128(second), 31), f = _mm_srli_epi32(_mm_castps_si128(fourth), 31);
  const __m128i at =
      _mm_add_epi32(s, _mm_and_si128(_mm_castps_si128(lower), _mm_sub_epi32(_mm_add_epi32(_mm_set1_epi32(2), f), s)));
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(at, at), _mm_setzero_si128());
  const int packed = _mm_cvtsi128_si32(bytes);
  std::memcpy(k, &packed, sizeof packed);
  return nan;
}

/// Eight floats x0..x7 as the even ones and the odd ones.
inline void splitPairs(__m128 lo, __m128 hi, __m128* even, __m128* odd) {
  *even = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  *odd = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
}

/// Eight bfloat16s widened to floats (each the upper half of a 32-bit lane), split as splitPairs.
inline void splitPairs(const uint16_t* p, __m128* even, __m128* odd) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i zero = _mm_setzero_si128();
  splitPairs(_mm_castsi128_ps(_mm_unpacklo_epi16(zero, v)), _mm_castsi128_ps(_mm_unpackhi_epi16(zero, v)), even, odd);
}

/// Four window positions 0..3 as 32-bit lanes.
inline __m128i positions(const uint8_t* k) {
  int packed;
  std::memcpy(&packed, k, sizeof packed);
  const __m128i zero = _mm_setzero_si128();
  return _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(packed), zero), zero);
}

/// 32-bit lanes holding 16-bit values, eight of them packed to 16 bits each.
inline __m128i narrow(__m128i lo, __m128i hi) {
  // Sign-extend first: packs saturates, and a bfloat16 with its sign bit set is >= 0x8000.
  return _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(lo, 16), 16), _mm_srai_epi32(_mm_slli_epi32(hi, 16), 16));
}

#endif  // LOCKSTEP_POOL_SSE2

}  // namespace

LOCKSTEP_VECTOR_CLONES int poolRowForward(const float* __restrict r0, const float* __restrict r1, float* __restrict o,
                                          uint8_t* __restrict k, int64_t ow) {
  int nan = 0;
  int64_t j = 0;
#ifdef LOCKSTEP_POOL_SSE2
  for (; j + 4 <= ow; j += 4) {
    __m128 a, b, c, d, relu;
    splitPairs(_mm_loadu_ps(r0 + 2 * j), _mm_loadu_ps(r0 + 2 * j + 4), &a, &b);
    splitPairs(_mm_loadu_ps(r1 + 2 * j), _mm_loadu_ps(r1 + 2 * j + 4), &c, &d);
    nan |= forwardFour(a, b, c, d, &relu, k + j);
    _mm_storeu_ps(o + j, relu);
  }
#endif
  for (; j < ow; ++j) {
    const float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
    nan |= std::isunordered(a, b) | std::isunordered(c, d);
    o[j] = windowForward(a, b, c, d, &k[j]);
  }
  return nan;
}

// bfloat16 is widened to float (exact) and the winner's upper 16 bits stored
// (exact again: it was a bfloat16).
LOCKSTEP_VECTOR_CLONES int poolRowForward(const uint16_t* __restrict r0, const uint16_t* __restrict r1,
                                          uint16_t* __restrict o, uint8_t* __restrict k, int64_t ow) {
  int nan = 0;
  int64_t j = 0;
#ifdef LOCKSTEP_POOL_SSE2
  for (; j + 4 <= ow; j += 4) {
    __m128 a, b, c, d, relu;
    splitPairs(r0 + 2 * j, &a, &b);
    splitPairs(r1 + 2 * j, &c, &d);
    nan |= forwardFour(a, b, c, d, &relu, k + j);
    const __m128i upper = _mm_srai_epi32(_mm_castps_si128(relu), 16);  // fits int16, so packs is exact
    _mm_storel_epi64(reinterpret_cast<__m128i*>(o + j), _mm_packs_epi32(upper, upper));
  }
#endif
  for (; j < ow; ++j) {
    const float a = widen(r0[2 * j]), b = widen(r0[2 * j + 1]), c = widen(r1[2 * j]), d = widen(r1[2 * j + 1]);
    nan |= std::isunordered(a, b) | std::isunordered(c, d);
    o[j] = static_cast<uint16_t>(bitsOf(windowForward(a, b, c, d, &k[j])) >> 16);
  }
  return nan;
}

LOCKSTEP_VECTOR_CLONES void poolRowBackward(const float* __restrict grad, const float* __restrict out,
                                            const uint8_t* __restrict k, float* __restrict r0, float* __restrict r1,
                                            int64_t ow) {
  int64_t j = 0;
#ifdef LOCKSTEP_POOL_SSE2
  for (; j + 4 <= ow; j += 4) {
    const __m128 zero = _mm_setzero_ps();
    const __m128 g = _mm_and_ps(_mm_add_ps(zero, _mm_loadu_ps(grad + j)), _mm_cmpnle_ps(_mm_loadu_ps(out + j), zero));
    const __m128i q = positions(k + j);
    __m128 v[4];
    for (int p = 0; p < 4; ++p) v[p] = _mm_and_ps(g, _mm_castsi128_ps(_mm_cmpeq_epi32(q, _mm_set1_epi32(p))));
    _mm_storeu_ps(r0 + 2 * j, _mm_unpacklo_ps(v[0], v[1]));
    _mm_storeu_ps(r0 + 2 * j + 4, _mm_unpackhi_ps(v[0], v[1]));
    _mm_storeu_ps(r1 + 2 * j, _mm_unpacklo_ps(v[2], v[3]));
    _mm_storeu_ps(r1 + 2 * j + 4, _mm_unpackhi_ps(v[2], v[3]));
  }
#endif
  for (; j < ow; ++j) {
    const uint32_t g = bitsOf(0.0f + grad[j]) & mask(!(out[j] <= 0.0f));
    const uint32_t q = k[j];
    r0[2 * j] = fromBits(g & mask(q == 0));
    r0[2 * j + 1] = fromBits(g & mask(q == 1));
    r1[2 * j] = fromBits(g & mask(q == 2));
    r1[2 * j + 1] = fromBits(g & mask(q == 3));
  }
}

// bfloat16 on the bits: an output is <= 0 only as +0 (ReLU writes +0).
LOCKSTEP_VECTOR_CLONES void poolRowBackward(const uint16_t* __restrict grad, const uint16_t* __restrict out,
                                            const uint8_t* __restrict k, uint16_t* __restrict r0,
                                            uint16_t* __restrict r1, int64_t ow) {
  int64_t j = 0;
#ifdef LOCKSTEP_POOL_SSE2
  for (; j + 4 <= ow; j += 4) {
    const __m128i zero = _mm_setzero_si128();
    const __m128i u = _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(grad + j)), zero);
    const __m128i outs = _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(out + j)), zero);
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7FFF)), _mm_set1_epi32(0x7F80));
    const __m128i plus = _mm_andnot_si128(_mm_cmpeq_epi32(u, _mm_set1_epi32(0x8000)), u);
    const __m128i sum = _mm_or_si128(_mm_andnot_si128(nan, plus), _mm_and_si128(nan, _mm_set1_epi32(0x7FC0)));
    const __m128i g = _mm_andnot_si128(_mm_cmpeq_epi32(outs, zero), sum);
    const __m128i q = positions(k + j);
    __m128i v[4];
    for (int p = 0; p < 4; ++p) v[p] = _mm_and_si128(g, _mm_cmpeq_epi32(q, _mm_set1_epi32(p)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r0 + 2 * j),
                     narrow(_mm_unpacklo_epi32(v[0], v[1]), _mm_unpackhi_epi32(v[0], v[1])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r1 + 2 * j),
                     narrow(_mm_unpacklo_epi32(v[2], v[3]), _mm_unpackhi_epi32(v[2], v[3])));
  }
#endif
  for (; j < ow; ++j) {
    const uint32_t g = plusZero(grad[j]) & mask(out[j] != 0);
    const uint32_t q = k[j];
    r0[2 * j] = static_cast<uint16_t>(g & mask(q == 0));
    r0[2 * j + 1] = static_cast<uint16_t>(g & mask(q == 1));
    r1[2 * j] = static_cast<uint16_t>(g & mask(q == 2));
    r1[2 * j + 1] = static_cast<uint16_t>(g & mask(q == 3));
  }
}

}  // namespace lockstep::detail

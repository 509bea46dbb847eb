/* cpu_fill.c — the initialisers on the host: zeros, ones, full, uniform and
 * normal over a span of a tensor's elements.
 *
 * A random element's value is a function of (seed, index) alone
 * (util/philox.h): one Philox-4x32-10 block per element. The generator is most
 * of the cost (ten rounds of two 32 x 32 -> 64-bit products), so on x86-64 the
 * blocks of 8 (AVX-512) or 4 (AVX2) consecutive elements are computed together
 * in the 64-bit lanes of a vector register, each lane holding one 32-bit word
 * of one element's counter: the products are vpmuludq's, the exclusive ors
 * plain lane operations. The variant is picked once from the CPU (cpuid), like
 * the BLAS's kernels. The 53-bit integer each lane yields is turned into a
 * double exactly, and the value is then computed with the same double
 * operations, in the same order, as the scalar code (no fused multiply-add: C11
 * mode turns contraction off), so every variant writes the scalar code's bits —
 * which are the CUDA kernels' bits. The normal initialiser's logarithm and
 * cosine stay libm's scalar calls (a vector libm would round differently).
 *
 * The uniform initialiser reads only u1, the block's words 0 and 1, so it has
 * its own loops: they drop what feeds words 2 and 3 alone (the last round's
 * other product) and write each value straight to the tensor, where the
 * normal initialiser's generator stores both uniforms for the passes after
 * it. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/backend.h"
#include "util/philox.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WEFT__X86 1
#endif

#define TWO_M53 (1.0 / 9007199254740992.0)

/* u1[k], u2[k] of elements first + k (philox.h), for k < BATCH: each variant computes BATCH
 * elements a call. The 53-bit integers convert to double exactly and scaling by 2^-53 is
 * exact, so every variant gives philox.h's doubles. */
enum { BATCH = 64 };
typedef void (*bits_fn)(uint64_t first, uint64_t seed, double *u1, double *u2);
/* lo + span u1 of elements first .. first + n - 1 (n a multiple of BATCH) into dst, rounded to
 * f32 if f32 is set, else f64. */
typedef void (*uniform_fn)(void *dst, int f32, uint64_t first, int64_t n, uint64_t seed, double lo, double span);

static void bits_scalar(uint64_t first, uint64_t seed, double *u1, double *u2) {
  for (int k = 0; k < BATCH; k++) weft__philox_uniform2(first + (uint64_t)k, seed, &u1[k], &u2[k]);
}

#ifdef WEFT__X86
/* A lane's upper 32 bits may hold garbage between rounds: the products read the lower 32 bits
 * only, and what is kept of a word at the end is masked. G groups of lanes go through the
 * rounds together: one group's rounds are a chain of dependent products, G hide each other's
 * latency. */
enum { G = 4 };

__attribute__((target("avx512f,avx512dq"))) static void bits_avx512(uint64_t first, uint64_t seed, double *u1,
                                                                    double *u2) {
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFF), step = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512d scale = _mm512_set1_pd(TWO_M53);
  for (int k = 0; k < BATCH; k += 8 * G) {
    __m512i c0[G], c1[G], c2[G], c3[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      c0[g] = _mm512_add_epi64(_mm512_set1_epi64((long long)(first + (uint64_t)(k + 8 * g))), step);
      c1[g] = _mm512_srli_epi64(c0[g], 32);
      c2[g] = c3[g] = _mm512_setzero_si512();
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      __m512i key0 = _mm512_set1_epi64(k0), key1 = _mm512_set1_epi64(k1);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m512i p0 = _mm512_mul_epu32(c0[g], m0), p1 = _mm512_mul_epu32(c2[g], m1);
        /* A product's upper half into its lower: a swap of the lane's halves (a shuffle, which
         * runs beside the products; a shift would queue behind them). */
        __m512i h1 = _mm512_shuffle_epi32(p1, _MM_PERM_CDAB), h0 = _mm512_shuffle_epi32(p0, _MM_PERM_CDAB);
        c0[g] = _mm512_ternarylogic_epi64(h1, c1[g], key0, 0x96); /* a ^ b ^ c */
        c2[g] = _mm512_ternarylogic_epi64(h0, c3[g], key1, 0x96);
        c1[g] = p1;
        c3[g] = p0;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      __m512i wa = _mm512_or_si512(_mm512_slli_epi64(c1[g], 32), _mm512_and_si512(c0[g], lo32));
      __m512i wc = _mm512_or_si512(_mm512_slli_epi64(c3[g], 32), _mm512_and_si512(c2[g], lo32));
      _mm512_storeu_pd(u1 + k + 8 * g, _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(wa, 11)), scale));
      _mm512_storeu_pd(u2 + k + 8 * g, _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(wc, 11)), scale));
    }
  }
}

/* AVX2 has no 64-bit integer to double conversion: x < 2^53 is 2 (x >> 1) + (x & 1), and a
 * 52-bit integer h is the double whose bits are 0x433 << 52 | h (2^52 + h) less 2^52, all
 * exact. */
__attribute__((target("avx2"))) static inline __m256d exact_pd(__m256i x) {
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000LL);
  const __m256d two52 = _mm256_set1_pd(4503599627370496.0);
  __m256d h = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(x, 1), magic)), two52);
  __m256i bit = _mm256_and_si256(x, _mm256_set1_epi64x(1));
  __m256d l = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(bit, magic)), two52);
  return _mm256_add_pd(_mm256_add_pd(h, h), l);
}

__attribute__((target("avx2"))) static void bits_avx2(uint64_t first, uint64_t seed, double *u1, double *u2) {
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF), step = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256d scale = _mm256_set1_pd(TWO_M53);
  for (int k = 0; k < BATCH; k += 4 * G) {
    __m256i c0[G], c1[G], c2[G], c3[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      c0[g] = _mm256_add_epi64(_mm256_set1_epi64x((long long)(first + (uint64_t)(k + 4 * g))), step);
      c1[g] = _mm256_srli_epi64(c0[g], 32);
      c2[g] = c3[g] = _mm256_setzero_si256();
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      __m256i key0 = _mm256_set1_epi64x(k0), key1 = _mm256_set1_epi64x(k1);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m256i p0 = _mm256_mul_epu32(c0[g], m0), p1 = _mm256_mul_epu32(c2[g], m1);
        c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), key0);
        c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), key1);
        c1[g] = p1;
        c3[g] = p0;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      __m256i wa = _mm256_or_si256(_mm256_slli_epi64(c1[g], 32), _mm256_and_si256(c0[g], lo32));
      __m256i wc = _mm256_or_si256(_mm256_slli_epi64(c3[g], 32), _mm256_and_si256(c2[g], lo32));
      _mm256_storeu_pd(u1 + k + 4 * g, _mm256_mul_pd(exact_pd(_mm256_srli_epi64(wa, 11)), scale));
      _mm256_storeu_pd(u2 + k + 4 * g, _mm256_mul_pd(exact_pd(_mm256_srli_epi64(wc, 11)), scale));
    }
  }
}

/* The uniform initialiser's loops. Philox's first round meets c2 = c3 = 0, so its second
 * product is 0: c0 = c1 ^ k0, c1 = 0, c2 = hi(p0) ^ k1, c3 = lo(p0). Where the G groups'
 * counters share their upper word c1 (unless they straddle a multiple of 2^32), that c0 is the
 * same in every lane, and so is the second round's p0: one scalar product, which leaves that
 * round's c2 an exclusive or with a constant. Of the last round only p1 = m1 c2 reaches u1
 * (words 0 and 1: hi(p1) ^ c1 ^ k0 and lo(p1)); p0 feeds words 2 and 3, u2, alone. (The
 * first two rounds' shortcuts save 5% of the AVX-512 loop's time on a Zen 4; most of the gain
 * over the generator and its passes is the u2 and the stores these loops do not make.) */
__attribute__((target("avx512f,avx512dq"), always_inline)) static inline void
round_avx512(__m512i *c, __m512i m0, __m512i m1, __m512i key0, __m512i key1) {
  __m512i p0 = _mm512_mul_epu32(c[0], m0), p1 = _mm512_mul_epu32(c[2], m1);
  /* A product's upper half into its lower: a swap of the lane's halves (a shuffle, which runs
   * beside the products; a shift would queue behind them). */
  __m512i h1 = _mm512_shuffle_epi32(p1, _MM_PERM_CDAB), h0 = _mm512_shuffle_epi32(p0, _MM_PERM_CDAB);
  c[0] = _mm512_ternarylogic_epi64(h1, c[1], key0, 0x96); /* a ^ b ^ c */
  c[2] = _mm512_ternarylogic_epi64(h0, c[3], key1, 0x96);
  c[1] = p1;
  c[3] = p0;
}

__attribute__((target("avx512f,avx512dq"), always_inline)) static inline void
uniform_avx512_loop(void *dst, int f32, uint64_t first, int64_t n, uint64_t seed, double lo, double span) {
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  const __m512i step = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512d scale = _mm512_set1_pd(TWO_M53), vlo = _mm512_set1_pd(lo), vspan = _mm512_set1_pd(span);
  for (int64_t k = 0; k < n; k += 8 * G) {
    __m512i c[G][4];
    uint64_t at = first + (uint64_t)k;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    __m512i key1 = _mm512_set1_epi64(k1);
    if (at >> 32 == (at + 8 * G - 1) >> 32) {
      uint64_t q = (uint64_t)0xD2511F53u * ((uint32_t)(at >> 32) ^ k0);
      __m512i b0 = _mm512_set1_epi64((uint32_t)(k0 + 0x9E3779B9u));
      __m512i b2 = _mm512_set1_epi64((uint32_t)(q >> 32) ^ (uint32_t)(k1 + 0xBB67AE85u));
      __m512i b3 = _mm512_set1_epi64((uint32_t)q);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m512i p0 = _mm512_mul_epu32(_mm512_add_epi64(_mm512_set1_epi64((long long)(at + 8u * g)), step), m0);
        __m512i p1 = _mm512_mul_epu32(_mm512_xor_si512(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), key1), m1);
        c[g][0] = _mm512_xor_si512(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), b0);
        c[g][1] = p1;
        c[g][2] = _mm512_xor_si512(p0, b2);
        c[g][3] = b3;
      }
    } else {
      __m512i key0 = _mm512_set1_epi64(k0);
      __m512i b0 = _mm512_set1_epi64((uint32_t)(k0 + 0x9E3779B9u));
      __m512i b1 = _mm512_set1_epi64((uint32_t)(k1 + 0xBB67AE85u));
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m512i ctr = _mm512_add_epi64(_mm512_set1_epi64((long long)(at + 8u * g)), step);
        __m512i p0 = _mm512_mul_epu32(ctr, m0);
        c[g][0] = _mm512_xor_si512(_mm512_srli_epi64(ctr, 32), key0);
        c[g][1] = _mm512_setzero_si512();
        c[g][2] = _mm512_xor_si512(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), key1);
        c[g][3] = p0;
        round_avx512(c[g], m0, m1, b0, b1);
      }
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
    for (int r = 2; r < 9; r++) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
      __m512i key0 = _mm512_set1_epi64(k0);
      key1 = _mm512_set1_epi64(k1);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) round_avx512(c[g], m0, m1, key0, key1);
    }
    __m512i key0 = _mm512_set1_epi64((uint32_t)(k0 + 0x9E3779B9u));
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      /* The swapped product is (lo(p1) << 32 | hi(p1)): the exclusive or of its lower halves
       * alone makes it word 1 << 32 | word 0. */
      __m512i p1 = _mm512_mul_epu32(c[g][2], m1);
      __m512i w = _mm512_mask_ternarylogic_epi32(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), 0x5555, c[g][1], key0, 0x96);
      __m512d u = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(w, 11)), scale);
      __m512d v = _mm512_add_pd(vlo, _mm512_mul_pd(vspan, u));
      if (f32)
        _mm256_storeu_ps((float *)dst + k + 8 * g, _mm512_cvtpd_ps(v));
      else
        _mm512_storeu_pd((double *)dst + k + 8 * g, v);
    }
  }
}

/* One copy per dtype, so that the loop has no branch. */
__attribute__((target("avx512f,avx512dq"))) static void uniform_avx512(void *dst, int f32, uint64_t first, int64_t n,
                                                                       uint64_t seed, double lo, double span) {
  if (f32)
    uniform_avx512_loop(dst, 1, first, n, seed, lo, span);
  else
    uniform_avx512_loop(dst, 0, first, n, seed, lo, span);
}

/* u1 without a conversion: with w = word 1 << 32 | word 0, u1 = (w >> 11) 2^-53 is
 * word 1 2^-32 + (word 0 >> 11) 2^-53. Under the exponent of 2^20 word 1 is the mantissa of
 * 2^20 + word 1 2^-32; under that of 2^-12, word 0 less its 11 low bits is the mantissa of
 * 2^-12 + (word 0 >> 11) 2^-53. The first less 2^20 + 2^-12 is exact (a multiple of 2^-32
 * below 1 in magnitude), and so is the sum with the second: it is u1, which has 53 bits.
 * The rounds are AVX-512's less the ternary logic, and a shift, not a swap, moves a product's
 * upper half: in ymm registers a Zen 4 runs the loop 20% faster so (in zmm, as fast). */
__attribute__((target("avx2"), always_inline)) static inline void round_avx2(__m256i *c, __m256i m0, __m256i m1,
                                                                              __m256i key0, __m256i key1) {
  __m256i p0 = _mm256_mul_epu32(c[0], m0), p1 = _mm256_mul_epu32(c[2], m1);
  c[0] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c[1]), key0);
  c[2] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c[3]), key1);
  c[1] = p1;
  c[3] = p0;
}

__attribute__((target("avx2"), always_inline)) static inline void
uniform_avx2_loop(void *dst, int f32, uint64_t first, int64_t n, uint64_t seed, double lo, double span) {
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  const __m256i step = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256i mant0 = _mm256_set1_epi64x(0xFFFFF800), exp0 = _mm256_set1_epi64x(0x3F30000000000000LL);
  const __m256i exp1 = _mm256_set1_epi64x(0x4130000000000000LL);
  const __m256d bias = _mm256_set1_pd(1048576.0 + 1.0 / 4096);
  const __m256d vlo = _mm256_set1_pd(lo), vspan = _mm256_set1_pd(span);
  for (int64_t k = 0; k < n; k += 4 * G) {
    __m256i c[G][4];
    uint64_t at = first + (uint64_t)k;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    __m256i key1 = _mm256_set1_epi64x(k1);
    if (at >> 32 == (at + 4 * G - 1) >> 32) {
      uint64_t q = (uint64_t)0xD2511F53u * ((uint32_t)(at >> 32) ^ k0);
      __m256i b0 = _mm256_set1_epi64x((uint32_t)(k0 + 0x9E3779B9u));
      __m256i b2 = _mm256_set1_epi64x((uint32_t)(q >> 32) ^ (uint32_t)(k1 + 0xBB67AE85u));
      __m256i b3 = _mm256_set1_epi64x((uint32_t)q);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m256i p0 = _mm256_mul_epu32(_mm256_add_epi64(_mm256_set1_epi64x((long long)(at + 4u * g)), step), m0);
        __m256i p1 = _mm256_mul_epu32(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), key1), m1);
        c[g][0] = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), b0);
        c[g][1] = p1;
        c[g][2] = _mm256_xor_si256(p0, b2);
        c[g][3] = b3;
      }
    } else {
      __m256i key0 = _mm256_set1_epi64x(k0);
      __m256i b0 = _mm256_set1_epi64x((uint32_t)(k0 + 0x9E3779B9u));
      __m256i b1 = _mm256_set1_epi64x((uint32_t)(k1 + 0xBB67AE85u));
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) {
        __m256i ctr = _mm256_add_epi64(_mm256_set1_epi64x((long long)(at + 4u * g)), step);
        __m256i p0 = _mm256_mul_epu32(ctr, m0);
        c[g][0] = _mm256_xor_si256(_mm256_srli_epi64(ctr, 32), key0);
        c[g][1] = _mm256_setzero_si256();
        c[g][2] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), key1);
        c[g][3] = p0;
        round_avx2(c[g], m0, m1, b0, b1);
      }
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
    for (int r = 2; r < 9; r++) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
      __m256i key0 = _mm256_set1_epi64x(k0);
      key1 = _mm256_set1_epi64x(k1);
#pragma GCC unroll 4
      for (int g = 0; g < G; g++) round_avx2(c[g], m0, m1, key0, key1);
    }
    __m256i key0 = _mm256_set1_epi64x((uint32_t)(k0 + 0x9E3779B9u));
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      __m256i p1 = _mm256_mul_epu32(c[g][2], m1);
      __m256i w0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c[g][1]), key0);
      __m256d d0 = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(w0, mant0), exp0));
      __m256d d1 = _mm256_castsi256_pd(_mm256_blend_epi32(p1, exp1, 0xAA));
      __m256d u = _mm256_add_pd(_mm256_sub_pd(d1, bias), d0);
      __m256d v = _mm256_add_pd(vlo, _mm256_mul_pd(vspan, u));
      if (f32)
        _mm_storeu_ps((float *)dst + k + 4 * g, _mm256_cvtpd_ps(v));
      else
        _mm256_storeu_pd((double *)dst + k + 4 * g, v);
    }
  }
}

__attribute__((target("avx2"))) static void uniform_avx2(void *dst, int f32, uint64_t first, int64_t n, uint64_t seed,
                                                         double lo, double span) {
  if (f32)
    uniform_avx2_loop(dst, 1, first, n, seed, lo, span);
  else
    uniform_avx2_loop(dst, 0, first, n, seed, lo, span);
}
#endif

static int has_avx512(void) {
#ifdef WEFT__X86
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return 0;
#endif
}

static bits_fn pick_bits(void) {
#ifdef WEFT__X86
  __builtin_cpu_init();
  if (has_avx512()) return bits_avx512;
  if (__builtin_cpu_supports("avx2")) return bits_avx2;
#endif
  return bits_scalar;
}

/* The uniform initialiser's loop that goes with a generator; NULL: the generator's, then the
 * affine pass. */
static uniform_fn uniform_variant(bits_fn f) {
#ifdef WEFT__X86
  if (f == bits_avx512) return uniform_avx512;
  if (f == bits_avx2) return uniform_avx2;
#endif
  return NULL;
}

static _Atomic(bits_fn) chosen;

static bits_fn bits_variant(void) {
  /* Racy first use is harmless: every thread computes and stores the same pointer. */
  bits_fn f = atomic_load_explicit(&chosen, memory_order_relaxed);
  if (f == NULL) {
    f = pick_bits();
    atomic_store_explicit(&chosen, f, memory_order_relaxed);
  }
  return f;
}

const char *weft__cpu_fill_variant(void) {
  bits_fn f = bits_variant();
#ifdef WEFT__X86
  if (f == bits_avx512) return "avx512";
  if (f == bits_avx2) return "avx2";
#endif
  return f == bits_scalar ? "scalar" : "?";
}

int weft__cpu_fill_select(const char *variant) {
  bits_fn f = NULL;
  if (strcmp(variant, "scalar") == 0) f = bits_scalar;
#ifdef WEFT__X86
  __builtin_cpu_init();
  if (strcmp(variant, "avx512") == 0 && has_avx512()) f = bits_avx512;
  if (strcmp(variant, "avx2") == 0 && __builtin_cpu_supports("avx2")) f = bits_avx2;
#endif
  if (f == NULL) return 0;
  atomic_store_explicit(&chosen, f, memory_order_relaxed);
  return 1;
}

int weft__cpu_isa(void) {
  static atomic_int isa = -1; /* racy first use: every thread stores the same value */
  int v = atomic_load_explicit(&isa, memory_order_relaxed);
  if (v < 0) {
    v = 0;
#ifdef WEFT__X86
    __builtin_cpu_init();
    v = has_avx512() ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    atomic_store_explicit(&isa, v, memory_order_relaxed);
  }
  return v;
}

/* v = lo + span u and the rounding to f32, in the widest vectors the CPU has: each element is
 * the scalar expression's (C11 mode contracts no multiply-add, so no variant fuses them). One
 * copy per instruction set, picked by weft__cpu_isa (not GCC's target_clones: its resolvers
 * run before a sanitizer's runtime starts, and crash under ThreadSanitizer). */
#define FILL_LOOPS(isa, attr)                                                                  \
  attr static void affine_##isa(double *v, const double *u, int m, double lo, double span) {  \
    for (int k = 0; k < m; k++) v[k] = lo + span * u[k];                                     \
  }                                                                                           \
  attr static void narrow_##isa(float *out, const double *v, int m) {                         \
    for (int k = 0; k < m; k++) out[k] = (float)v[k];                                        \
  }
FILL_LOOPS(base, )
#ifdef WEFT__X86
FILL_LOOPS(avx2, __attribute__((target("avx2"))))
FILL_LOOPS(avx512, __attribute__((target("avx512f,avx512dq"))))
#endif

static void affine(double *v, const double *u, int m, double lo, double span) {
#ifdef WEFT__X86
  int isa = weft__cpu_isa();
  if (isa == 2)
    affine_avx512(v, u, m, lo, span);
  else if (isa == 1)
    affine_avx2(v, u, m, lo, span);
  else
#endif
    affine_base(v, u, m, lo, span);
}

static void narrow(float *out, const double *v, int m) {
#ifdef WEFT__X86
  int isa = weft__cpu_isa();
  if (isa == 2)
    narrow_avx512(out, v, m);
  else if (isa == 1)
    narrow_avx2(out, v, m);
  else
#endif
    narrow_base(out, v, m);
}

/* Elements first .. first + n - 1 of a random tensor into dst[0 .. n - 1]. */
static void fill_random(void *dst, int dtype, int64_t first, int64_t n, weft_init init) {
  bits_fn bits = bits_variant();
  uniform_fn uniform = uniform_variant(bits);
  double u1[BATCH], u2[BATCH], v[BATCH];
  double lo = init.a, span = init.b - init.a;
  int64_t done = 0;
  if (init.kind == WEFT_INIT_UNIFORM && uniform != NULL) {
    done = n / BATCH * BATCH;
    uniform(dst, dtype == WEFT_F32, (uint64_t)first, done, init.seed, lo, span);
  }
  for (int64_t k0 = done; k0 < n; k0 += BATCH) {
    int m = n - k0 < BATCH ? (int)(n - k0) : BATCH;
    if (m == BATCH)
      bits((uint64_t)(first + k0), init.seed, u1, u2);
    else
      for (int k = 0; k < m; k++) weft__philox_uniform2((uint64_t)(first + k0 + k), init.seed, &u1[k], &u2[k]);
    if (init.kind == WEFT_INIT_UNIFORM)
      affine(v, u1, m, lo, span);
    else
      for (int k = 0; k < m; k++)
        v[k] = init.a + init.b * sqrt(-2.0 * log(1.0 - u1[k])) * cos(6.283185307179586 * u2[k]);
    if (dtype == WEFT_F32) {
      narrow((float *)dst + k0, v, m);
    } else {
      memcpy((double *)dst + k0, v, (size_t)m * sizeof(double));
    }
  }
}

void weft__cpu_fill_at(void *dst, int dtype, int64_t first, int64_t n, weft_init init) {
  if (n <= 0) return;
  switch (init.kind) {
    case WEFT_INIT_ZEROS:
      memset(dst, 0, (size_t)n * weft_dtype_size(dtype));
      return;
    case WEFT_INIT_ONES:
    case WEFT_INIT_FULL: {
      double v = init.kind == WEFT_INIT_ONES ? 1.0 : init.a;
      if (dtype == WEFT_F32) {
        float f = (float)v, *p = dst;
        for (int64_t k = 0; k < n; k++) p[k] = f;
      } else {
        double *p = dst;
        for (int64_t k = 0; k < n; k++) p[k] = v;
      }
      return;
    }
    case WEFT_INIT_EYE: {
      /* Zeros, then the diagonal: element r * (cols + 1) of rows of `cols` (a division an
       * element made a 2048² f64 identity 17 ms on an H100's host; memset's speed now). */
      int64_t cols = (int64_t)init.seed;
      memset(dst, 0, (size_t)n * weft_dtype_size(dtype));
      for (int64_t r = cols > 0 ? first / cols : 0; cols > 0 && r * (cols + 1) < first + n; r++) {
        int64_t k = r * (cols + 1) - first;
        if (k < 0 || r >= cols) continue;
        if (dtype == WEFT_F32)
          ((float *)dst)[k] = (float)init.a;
        else
          ((double *)dst)[k] = init.a;
      }
      return;
    }
    default:
      fill_random(dst, dtype, first, n, init);
  }
}

void weft__cpu_fill(void *p, int dtype, int64_t n, weft_init init) { weft__cpu_fill_at(p, dtype, 0, n, init); }

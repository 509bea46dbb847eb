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
 * cosine stay libm's scalar calls (a vector libm would round differently). */
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
  double u1[BATCH], u2[BATCH], v[BATCH];
  double lo = init.a, span = init.b - init.a;
  for (int64_t k0 = 0; k0 < n; k0 += BATCH) {
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

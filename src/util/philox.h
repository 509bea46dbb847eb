/* philox.h — the Philox-4x32-10 counter-based generator (Salmon et al., SC'11; the algorithm
 * behind cuRAND's PHILOX4_32_10) and weft's random initialisers, shared by the CPU backend and
 * the CUDA kernels so that a seed gives the same tensor on every device.
 *
 * Element i of a tensor takes the block Philox(counter = (i, 0), key = seed):
 *   u1 = 53 bits of words (x, y) / 2^53 in [0, 1),  u2 = likewise from (z, w);
 *   uniform(lo, hi) = lo + (hi - lo) * u1            (exact in double: bit-identical everywhere)
 *   normal(m, s)    = m + s * sqrt(-2 ln(1 - u1)) * cos(2 pi u2)
 * computed in double and rounded once to the tensor's dtype. Values depend only on (seed, i):
 * not on the device, the thread count or the order of execution. */
#ifndef WEFT_PHILOX_H
#define WEFT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define WEFT__HD __host__ __device__ __forceinline__
#else
#define WEFT__HD static inline
#endif

typedef struct weft__philox_block {
  uint32_t v[4];
} weft__philox_block;

WEFT__HD weft__philox_block weft__philox4x32_10(uint64_t counter, uint64_t seed) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  weft__philox_block b = {{c0, c1, c2, c3}};
  return b;
}

/* The two uniforms in [0, 1) of element i. */
WEFT__HD void weft__philox_uniform2(uint64_t i, uint64_t seed, double *u1, double *u2) {
  weft__philox_block b = weft__philox4x32_10(i, seed);
  uint64_t a = ((uint64_t)b.v[1] << 32 | b.v[0]) >> 11;
  uint64_t c = ((uint64_t)b.v[3] << 32 | b.v[2]) >> 11;
  *u1 = (double)a * (1.0 / 9007199254740992.0);
  *u2 = (double)c * (1.0 / 9007199254740992.0);
}

#endif

/* Whole-stack ALiBi + content rollout profile p = e_{N-1}^T R^(T-1) ... R^(0) on the CPU.
 *
 * Called through ctypes by numerics/native.py (posbias_profile below); no JAX involved.
 * Mathematics (THEORY.md, Notation; numerics/structured.py): head h of layer t has slope
 * m >= 0 and diagonal excess d (both already divided by the temperature), r = e^{-m},
 * q = e^{-d} (d clipped to |d| <= 600). Row i of the head reads itself with weight
 *     alpha_i = 1 / (1 + q S_i)
 * and each allowed j != i with weight c_i r^{|i-j|}, c_i = q alpha_i, where
 *     S_i = G(a_i) + G(f_i),  G(L) = sum_{g=1}^{L} r^g,
 * a_i = min(i, L) the past reach (L = w - 1 for a sliding window w, else a_i = i) and
 * f_i = K - 1 - i for i < K (bidirectional prefix length K > 1), else 0. With
 * u_i = w_h c_i v_i one layer is
 *     v'_j = (1 - lambda) v_j + lambda (alphabar_j v_j + sum_h (back_{h,j} + fwd_{h,j})),
 *     back_j = sum_{j < i <= j+L} r^{i-j} u_i,   fwd_j = [j < K] sum_{i < j} r^{j-i} u_i,
 * O(H N) per layer through first-order recurrences along the tokens:
 *   * no window:  back_{j-1} = r (back_j + u_j)  (descending sweep; the carry only decays).
 *   * window:     no subtraction. Tokens are cut into segments of length L;
 *                 back_j = A_j + C_j with A_j the part inside j's own segment (the same
 *                 descending recurrence, reset at each segment end) and C_j the part in the
 *                 next segment, C_{e-L} = sum_{i=seg start}^{e} r^{L-(e-i)} u_i, produced by an
 *                 ascending recurrence C <- r^{-1} C + r^L u_e. All terms are non-negative,
 *                 so nothing cancels (a subtraction r^L u_{j+L} would lose every value far
 *                 below the removed one, and leave residues where the true value is 0).
 *   * bidirectional: fwd_{e+1} = r (fwd_e + u_e), ascending sweep over e < K.
 *
 * Row normalisers are never stored: S_i is evaluated on the fly per head from
 *     G(n0 + k) = G(n0) + r^{n0} G(k)        (an exact identity, all terms >= 0)
 * with anchors n0 = multiples of A (A = 1024, or the next power of two >= N + 1 if smaller)
 * G(n0) = -expm1(-m n0)/expm1(m), r^{n0} = exp(-m n0) from libm, and a table G(k), k < A,
 * itself built the same way from two levels (64 k1 + k0) of closed forms. Each evaluation
 * is a sum of non-negative terms whose relative errors are a few ulps (libm's expm1/exp
 * are ~1 ulp; rounding of m n0 perturbs exp(-m n0) by (m n0) u relatively but the term is
 * weighted by r^{n0}, and x e^{-x} <= 1/e), so S agrees with the closed form to < 1e-14
 * relative (tests/numerics/test_native.py checks it against mpmath). Tables are cached per head
 * group and rebuilt only when the group's slopes change between layers.
 *
 * Heads are processed HB = 8 at a time as SIMD lanes (GCC/Clang vector extensions); head
 * groups are split statically across pthreads, each thread accumulating into private (N,)
 * buffers that are merged at the end of every layer (memory O(threads N)). The grouping
 * does not depend on the thread count, so results differ between thread counts only by
 * the order of the final sums (a few ulps). Subnormals are flushed to zero (FTZ/DAZ) in
 * the workers: in linear mode values below ~2.2e-308 become exact zeros.
 *
 * Products are ordered so that no intermediate leaves the float64 range while the result
 * is representable: u = (r w sigma) (q alpha) M, with q alpha = 1/(1/q + S) moderate even
 * where q ~ e^600 and alpha ~ e^-600; the window sweep keeps r^L as mantissa 2^exponent.
 *
 * Error of one layer (linear mode): every term is a product of non-negative factors and
 * every sum has non-negative terms, so the computed v' has relative error O(n u) per entry,
 * n the recurrence distance the dominant terms travel (the weight r^n is formed as
 * fl(r)^n, error n u/2; the dense reference's exp(-m n) carries (1 + m n) u): about 1e-14
 * for N <= 64, and no cancellation anywhere (windows included). Terms below 2^-1022 are lost.
 *
 * Extended range (block floating point): v_i = M_i 2^{E_b}, block b = positions
 * [bB, bB+B), max M in [1/2, 1) per block (E_b = EMPTY for an all-zero block).
 *   * Carries: every head lane keeps its own exponent (the SIMD lanes of one group may differ
 *     by far more than 2^1022: slope 700 next to slope 0, q = e^{+-600}, tiny weights). At
 *     each block entry a lane's scale is the larger of its carry's size after the first
 *     multiplication by r (resp. r^-1 for the window's C) and the size of the terms this
 *     block feeds in, r w c 2^{E_b} (c at the block's first position; within a block c
 *     varies by at most 2N, positions with S = 0 aside, whose term is never emitted). So a
 *     lane is never flushed against another lane or against the block's own values: only
 *     parts below 2^-1022 of the lane's own scale are lost. What each lane may have lost is
 *     bounded explicitly (ell, decaying with r^len through a block; cl for the window's C,
 *     growing with it) and recorded per output block and thread (lossm 2^losse).
 *   * Per-thread output blocks have exponents Y_b, raised to the largest emission scale.
 *   * Merge: (1 - lambda + lambda abar_j) M_j is kept in the scale 2^{E_b} and lambda o_j,
 *     with lambda = lm 2^le split exactly (a tiny or subnormal lambda is an exponent, not an
 *     underflow), in the scale of the largest actual thread entry; the block's new scale W is
 *     that of the larger of the two after weighting. An entry fails only where its value
 *     does not exceed 2^RANGE_MARGIN times the bound on what was flushed into it: lambda
 *     (recorded lane losses + a few 2^-1022 of the threads' emission scales), 2^-1022 of
 *     2^{E_b} where its own term underflowed, 2^-1021 of 2^W where one of the two terms
 *     underflowed in the final sum. A passing entry has an extra relative error below
 *     2^-100: it is exact to float64 working precision whatever its magnitude, and whatever
 *     the sizes of the contributions it adds up (a contribution far below the entry's value
 *     just rounds away, which is correct). Positions outside the support [lo, N-1] are
 *     exactly 0; a support position must be > 0.
 * Failing the check (POSBIAS_ERR_RANGE) means the block's entries span more than float64's
 * exponent range (~2^1022 minus the margin): the layer stops, leaving the state of the
 * previous layer, and the caller (native.py) continues with smaller blocks.
 * Single-token blocks (B = 1) do not fail: a block of one entry has one mantissa and one
 * exponent, every lane's scale follows its own values, so every loss above is relative to
 * the entry's own terms: below 2^-1015 N of its carries, and the emission-scale terms are
 * below 2^(-920 + 7) (groups + 1) of lambda o_j, or of its own term, which is at least
 * abar_j 2^{E_b - 1} >= 2^{E_b - 867} / N (alpha >= 1 / (1 + e^600 S), S <= N; where S = 0,
 * at position 0, alpha = 1 and the block's terms may be e^600 larger). The check
 * can therefore fail at B = 1 only for N (groups + 1) above ~2^40 tokens, far beyond memory.
 * Weights below 2^-1022 (subnormal) are treated as 0 (as FTZ/DAZ would read them).
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"
#define HB 8
typedef double vd __attribute__((vector_size(HB * sizeof(double))));

#define TAB_SHIFT_MAX 10
#define LEVEL0 64
#define EMPTY (-((int64_t)1 << 40)) /* exponent of an all-zero block / carry */
#define D_CLIP 600.0
#define RANGE_MARGIN 100 /* entries must exceed their loss bound by 2^RANGE_MARGIN */
#define CL_SHIFT 100 /* units of the window sweep's loss bound: 2^(ce - CL_SHIFT) */
#define C_HEADROOM 500 /* bits a window sweep's C may grow between renormalisations */
#define MAX_THREADS 64
#define GUARD 0x1p-900 /* guarded linear mode (ext = 2): the smallest support entry it keeps */

/* The sweeps are compiled for AVX-512, AVX2+FMA and baseline x86-64, chosen at load time
 * (plain `cc -O3` gives only SSE2 otherwise). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

enum {
  POSBIAS_OK = 0,
  POSBIAS_ERR_RANGE = 1,   /* an entry would lose relative precision (block range too wide) */
  POSBIAS_ERR_NONFINITE = 2,
  POSBIAS_ERR_MEMORY = 3,
  POSBIAS_ERR_ARGS = 4,
  POSBIAS_ERR_THREAD = 5,
};

/* ------------------------------------------------------------------ small helpers */

static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

static inline vd vload(const double *p) { vd v; memcpy(&v, p, sizeof v); return v; }
static inline vd vsplat(double x) {
  vd v;
  for (int k = 0; k < HB; ++k) v[k] = x;
  return v;
}
typedef double vd4 __attribute__((vector_size(4 * sizeof(double))));
typedef double vd2 __attribute__((vector_size(2 * sizeof(double))));
/* Pairwise lane sum (a fixed tree: the same result on every thread). */
static inline double hsum(vd v) {
  vd4 a, b;
  memcpy(&a, &v, sizeof a);
  memcpy(&b, (const char *)&v + sizeof a, sizeof b);
  a += b;
  vd2 c, d;
  memcpy(&c, &a, sizeof c);
  memcpy(&d, (const char *)&a + sizeof c, sizeof d);
  c += d;
  return c[0] + c[1];
}
static inline double vmaxabs(vd v) {
  double m = 0.0;
  for (int k = 0; k < HB; ++k) m = fabs(v[k]) > m ? fabs(v[k]) : m;
  return m;
}

/* 2^e as a double (0 below the subnormal range, inf above the range). */
static inline double pow2i(int64_t e) {
  if (e > 1023) return INFINITY;
  if (e < -1022) return e < -1074 ? 0.0 : ldexp(1.0, (int)e);
  const uint64_t bits = (uint64_t)(e + 1023) << 52;
  double x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
/* x 2^e (x finite), in two steps so that |e| up to 2046 neither overflows nor flushes early;
 * 0 stays 0 whatever e (never 0 * inf). */
static inline double scale2(double x, int64_t e) {
  if (e >= -1022 && e <= 1023) return x * pow2i(e);
  if (x == 0.0 || e < -2100) return 0.0 * x;
  if (e > 2046) return x * INFINITY;
  const int64_t h = e / 2;
  return (x * pow2i(h)) * pow2i(e - h);
}
typedef int64_t vi __attribute__((vector_size(HB * sizeof(int64_t))));
/* Lane-wise e with |x| = f 2^e, f in [1/2, 1), for normal x (1/2 < |x| 2^1022). */
static inline vi vexpo(vd x) {
  vi bits;
  memcpy(&bits, &x, sizeof bits);
  return ((bits >> 52) & 0x7ff) - 1022;
}
/* Lane-wise 2^e for -1022 <= e <= 1023. */
static inline vd vpow2(vi e) {
  const vi bits = (e + 1023) << 52;
  vd x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
/* e with x = f 2^e, f in [1/2, 1) (x > 0 finite). */
static inline int64_t expo(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  const int64_t biased = (int64_t)((bits >> 52) & 0x7ff);
  if (biased == 0) { /* subnormal (or zero) */
    int e;
    frexp(x, &e);
    return e;
  }
  return biased - 1022;
}

/* G(n) = sum_{g=1}^n e^{-m g} and e^{-m n} in closed form (libm). */
static double geo_closed(double m, double n) {
  if (m == 0.0) return n;
  return -expm1(-m * n) / expm1(m);
}

/* ------------------------------------------------------------------ per-group tables */

typedef struct {
  double m[HB];
  int valid;
  int64_t shift, len, nanch; /* table length A = 2^shift; anchors 0, A, 2A, ... */
  double *tab;               /* (A, HB): G(k) */
  double *anG, *anR;         /* (nanch, HB): G(iA), r^{iA} */
} tables_t;

static void *amalloc(size_t bytes) {
  void *p = NULL;
  size_t b = (bytes + 63) / 64 * 64;
  if (b == 0) b = 64;
  if (posix_memalign(&p, 64, b) != 0) return NULL;
  return p;
}

static int tables_alloc(tables_t *tb, int64_t reach) {
  int64_t shift = 0;
  while (shift < TAB_SHIFT_MAX && ((int64_t)1 << shift) < reach + 1) ++shift;
  tb->shift = shift;
  tb->len = (int64_t)1 << shift;
  tb->nanch = (reach >> shift) + 2;
  tb->valid = 0;
  tb->tab = amalloc((size_t)tb->len * HB * sizeof(double));
  tb->anG = amalloc((size_t)tb->nanch * HB * sizeof(double));
  tb->anR = amalloc((size_t)tb->nanch * HB * sizeof(double));
  return tb->tab && tb->anG && tb->anR;
}

static void tables_free(tables_t *tb) {
  free(tb->tab);
  free(tb->anG);
  free(tb->anR);
}

static void tables_build_lane(tables_t *tb, int k, double m) {
  /* G(k) for k < A as G(64 k1 + k0) = G(64 k1) + r^{64 k1} G(k0). */
  double g0[LEVEL0];
  for (int64_t k0 = 0; k0 < LEVEL0; ++k0) g0[k0] = geo_closed(m, (double)k0);
  for (int64_t base = 0; base < tb->len; base += LEVEL0) {
    const double gb = geo_closed(m, (double)base), rb = exp(-m * (double)base);
    for (int64_t k0 = 0; k0 < LEVEL0 && base + k0 < tb->len; ++k0) {
      tb->tab[(base + k0) * HB + k] = base == 0 ? g0[k0] : gb + rb * g0[k0];
    }
  }
  for (int64_t i = 0; i < tb->nanch; ++i) {
    const double n0 = (double)(i << tb->shift);
    tb->anG[i * HB + k] = geo_closed(m, n0);
    tb->anR[i * HB + k] = exp(-m * n0);
  }
  tb->m[k] = m;
}

static void tables_update(tables_t *tb, const double *m) {
  for (int k = 0; k < HB; ++k) {
    if (!tb->valid || tb->m[k] != m[k]) tables_build_lane(tb, k, m[k]);
  }
  tb->valid = 1;
}

/* G(n) for every lane, n <= reach. */
static inline vd geo_eval(const tables_t *tb, int64_t n) {
  const int64_t i = n >> tb->shift;
  return vload(tb->anG + i * HB) + vload(tb->anR + i * HB) * vload(tb->tab + (n - (i << tb->shift)) * HB);
}

/* Scalar version for one lane (test hook and constants). */
static inline double geo_eval1(const tables_t *tb, int k, int64_t n) {
  const int64_t i = n >> tb->shift;
  return tb->anG[i * HB + k] + tb->anR[i * HB + k] * tb->tab[(n - (i << tb->shift)) * HB + k];
}

/* ------------------------------------------------------------------ problem / threads */

typedef struct {
  int64_t n, heads, nlayers, window_l, windowed, bidir, block, nb, ext, nthreads, ngroups;
  double guard; /* guarded linear mode: stop where a support entry falls below it (0: off) */
  const double *lambdas, *slopes, *diag, *weights; /* (nlayers,), (nlayers, heads) */
  double *mant_buf[2];                             /* (n,): layer input / output, alternating */
  int64_t *ex_buf[2];                              /* (nb,) */
  int64_t support_lo;
  double *min_self, *last_self;                    /* (nlayers,) */
  double *part_min;                                /* (nlayers, nthreads) */
  pthread_barrier_t barrier;
  pthread_mutex_t gate_lock;
  pthread_cond_t gate;
  int go;                                          /* 0: wait, 1: run, -1: abandon */
  volatile int error;                              /* set during merges, read after barriers */
  int final_buf;                                   /* buffer holding the last completed layer */
} problem_t;

typedef struct {
  /* per-layer lane constants: r = e^-m, q = e^-d, w, rho = 1/r; with a window the
   * constant row normaliser G(L), its alpha, and w q alpha */
  vd r, q, w, rho, gl, alpha_c;
  double wqm[HB];  /* w q alpha (window rows with the full past) = wqm 2^wqe, wqm in [1/2, 1) or 0 */
  int64_t wqe[HB];
  vd rlm;          /* r^L = rlm 2^rle */
  int64_t rle[HB];
  int64_t ks;      /* renormalisation cadence of the window sweep */
  int active;      /* some lane has w > 0 */
  /* extended mode: r w = rwm 2^rwe per lane (rwm = 0 where w = 0), and the loss bound's
   * decay r^len and growth through a block of len = B tokens (full) or the top block */
  double rwm[HB];
  int64_t rwe[HB], er[HB]; /* er: r >= 2^er */
  vd rwmv;                 /* the same as vectors (fast path of lane_entry) */
  vi rwev, erv;
  int all_active;          /* every lane has w > 0 */
  vd dec_full, add_full, dec_top, add_top;
  tables_t tb;
} group_t;

typedef struct {
  problem_t *pb;
  int64_t id, g0, g1, blk0, blk1;
  group_t *groups;
  double *out, *abar;
  int64_t *y;
  double *lossm;      /* (nb,): carry-loss bound of the block's out entries, lossm 2^losse */
  int64_t *losse;
  const double *mant; /* this layer's input v = mant 2^ex */
  const int64_t *ex;
  double *next_mant;  /* this layer's output */
  int64_t *next_ex;
  int err_code;
  int64_t err_layer, err_pos;
} thread_t;

static void group_setup(const problem_t *pb, group_t *g, int64_t gi, int64_t layer) {
  const int64_t h0 = gi * HB;
  double mv[HB];
  g->active = 0;
  double mmax = 0.0;
  for (int k = 0; k < HB; ++k) {
    const int64_t h = h0 + k;
    double m = 0.0, d = 0.0, w = 0.0;
    if (h < pb->heads) {
      m = pb->slopes[layer * pb->heads + h];
      d = pb->diag[layer * pb->heads + h];
      w = pb->weights[layer * pb->heads + h];
    }
    if (!(w >= DBL_MIN)) w = 0.0; /* subnormal weights are zeros under FTZ/DAZ anyway */
    if (d > D_CLIP) d = D_CLIP;
    if (d < -D_CLIP) d = -D_CLIP;
    mv[k] = m;
    const double r = exp(-m), q = exp(-d);
    g->r[k] = r;
    g->q[k] = q;
    g->w[k] = w;
    g->rho[k] = 1.0 / r;
    if (w != 0.0) {
      g->active = 1;
      if (m > mmax) mmax = m;
    }
    int er = 0, ew = 0;
    const double rm = frexp(r, &er), wm = frexp(w, &ew);
    g->rwm[k] = w != 0.0 ? rm * wm : 0.0;
    g->rwe[k] = (int64_t)er + ew;
    g->er[k] = (int64_t)er - 1;
  }
  tables_update(&g->tb, mv);
  g->all_active = 1;
  for (int k = 0; k < HB; ++k) {
    g->rwmv[k] = g->rwm[k];
    g->rwev[k] = g->rwe[k];
    g->erv[k] = g->er[k];
    g->all_active &= g->rwm[k] != 0.0;
  }
  if (pb->ext) {
    /* Carry-loss bound through a block of len tokens: ell <- ell r^len + (4 sum_{k<len} r^k + 1)
     * 2^-1022 (at most 4 flushed operations per token, each below 2^-1022 of the lane's scale,
     * decaying with the carry; + 2^-1022 where ell r^len itself underflows). */
    const int64_t top = pb->n - (pb->nb - 1) * pb->block, full = imin(pb->block, pb->n);
    for (int k = 0; k < HB; ++k) {
      g->dec_full[k] = exp(-mv[k] * (double)full);
      g->add_full[k] = (4.0 * (1.0 + geo_eval1(&g->tb, k, full - 1)) + 1.0) * 0x1p-1022;
      g->dec_top[k] = exp(-mv[k] * (double)top);
      g->add_top[k] = (4.0 * (1.0 + geo_eval1(&g->tb, k, top - 1)) + 1.0) * 0x1p-1022;
    }
  }
  if (pb->windowed) {
    const int64_t L = pb->window_l;
    for (int k = 0; k < HB; ++k) {
      g->gl[k] = geo_eval1(&g->tb, k, L);
      g->alpha_c[k] = 1.0 / (1.0 + g->q[k] * g->gl[k]);
      /* w q alpha = w c, kept as mantissa 2^exponent (w c may lie below 2^-1022) */
      int ewq = 0, ecq = 0;
      const double wmq = frexp(g->w[k], &ewq), cmq = frexp(g->q[k] * g->alpha_c[k], &ecq);
      int s0 = 0;
      g->wqm[k] = g->w[k] != 0.0 ? frexp(wmq * cmq, &s0) : 0.0;
      g->wqe[k] = (int64_t)ewq + ecq + s0;
      /* r^L by binary powering of fl(r), kept as mantissa 2^exponent. */
      int be;
      double bm = frexp(g->r[k], &be);
      int64_t bex = be;
      double am = 1.0;
      int64_t aex = 0;
      for (int64_t e = L; e > 0; e >>= 1) {
        if (e & 1) {
          int s;
          am = frexp(am * bm, &s);
          aex += bex + s;
        }
        int s2;
        bm = frexp(bm * bm, &s2);
        bex = 2 * bex + s2;
      }
      if (g->r[k] == 0.0) { am = 0.0; aex = 0; }
      g->rlm[k] = am;
      g->rle[k] = aex;
    }
    /* C grows by r^{-1} per token: renormalise before the growth reaches 2^C_HEADROOM. */
    const double bits = mmax * 1.4426950408889634;
    int64_t ks = bits > 0 ? (int64_t)((C_HEADROOM - 8) / bits) : pb->block;
    g->ks = imax(1, imin(ks, pb->block));
  }
}

/* Raise the thread's output block b to scale x (rescaling what it holds). */
static inline void raise_y(thread_t *th, int64_t b, int64_t x) {
  const problem_t *pb = th->pb;
  if (!pb->ext || x <= th->y[b]) return;
  if (th->y[b] != EMPTY) {
    const int64_t b0 = b * pb->block, b1 = imin(pb->n, b0 + pb->block);
    const int64_t sh = th->y[b] - x;
    for (int64_t j = b0; j < b1; ++j) th->out[j] = scale2(th->out[j], sh);
  } /* an EMPTY block holds zeros */
  th->y[b] = x;
}

/* Lane values of S at position j in a span: S = P0 + P1 tab[j - pbase] (+ future part). */
typedef struct {
  int past_const, fut;
  vd pc, p0, p1, f0, f1;
  int64_t pbase, fbase; /* tab index: j - pbase; (K-1-j) - fbase */
} span_t;

/* The largest span [lo, j] (descending from j) or [j, hi) (ascending) with fixed S coefficients. */
static inline int64_t span_setup(const problem_t *pb, const group_t *g, int64_t j, int descending,
                                 span_t *sp) {
  const tables_t *tb = &g->tb;
  const int64_t shift = tb->shift, K = pb->bidir;
  sp->pbase = sp->fbase = 0;
  int64_t lim = descending ? 0 : pb->n; /* lowest start / highest end */
  if (pb->windowed && j >= pb->window_l) {
    sp->past_const = 1;
    sp->pc = g->gl;
    if (descending) lim = imax(lim, pb->window_l);
  } else {
    sp->past_const = 0;
    const int64_t a = j >> shift;
    sp->p0 = vload(tb->anG + a * HB);
    sp->p1 = vload(tb->anR + a * HB);
    sp->pbase = a << shift;
    if (descending) lim = imax(lim, a << shift);
    else lim = imin(lim, (a + 1) << shift);
    if (pb->windowed && !descending) lim = imin(lim, pb->window_l);
  }
  sp->fut = 0;
  if (K > 1) {
    if (j < K) {
      sp->fut = 1;
      const int64_t f = K - 1 - j, a = f >> shift;
      sp->f0 = vload(tb->anG + a * HB);
      sp->f1 = vload(tb->anR + a * HB);
      sp->fbase = a << shift;
      if (descending) lim = imax(lim, K - ((a + 1) << shift));
      else lim = imin(lim, K - (a << shift));
    } else if (descending) {
      lim = imax(lim, K);
    }
  }
  return lim;
}

static inline vd span_s(const group_t *g, const span_t *sp, int64_t j, int64_t K) {
  vd s = sp->past_const ? sp->pc : sp->p0 + sp->p1 * vload(g->tb.tab + (j - sp->pbase) * HB);
  if (sp->fut) s += sp->f0 + sp->f1 * vload(g->tb.tab + ((K - 1 - j) - sp->fbase) * HB);
  return s;
}

/* c = q alpha = q / (1 + q S_i) of every lane at position i. */
static inline __attribute__((always_inline)) vd c_at(const problem_t *pb, const group_t *g, int64_t i) {
  const int64_t K = pb->bidir;
  vd s = geo_eval(&g->tb, pb->windowed ? imin(i, pb->window_l) : i);
  if (K > 1 && i < K) s += geo_eval(&g->tb, K - 1 - i);
  return g->q / (1.0 + g->q * s);
}

/* Add m 2^e to the thread's carry-loss bound of block b. */
static inline void add_loss(thread_t *th, int64_t b, double m, int64_t e) {
  if (!(m > 0.0)) return;
  if (th->lossm[b] > 0.0) {
    const int64_t top = imax(e, th->losse[b]);
    m = scale2(th->lossm[b], th->losse[b] - top) + scale2(m, e - top) + 0x1p-1000; /* rounded up */
    e = top;
  }
  const int64_t s = expo(m);
  th->lossm[b] = scale2(m, -s);
  th->losse[b] = e + s;
}

/* Extended mode, entry of block b (sweeping through position ipos first): every lane k keeps
 * its carry as t_k 2^xl[k], xl[k] = max(the carry's own exponent, the exponent of the terms
 * this block feeds in, u = r w c v <= rwm c 2^(rwe + E_b)), so that a lane is never flushed
 * against another lane or against the block's own values: only terms below 2^-1022 of the
 * lane's own scale are lost. ell bounds (in each lane's scale) what the lane has lost so far:
 * through the previous block it decays with r^len and grows by dec/add (group_setup); each
 * rescale to a larger scale adds 2^-1021 (t and ell flushed there). The block's emissions
 * then carry an absolute loss <= sum_k (ell_k + add_cur_k) 2^xl[k], recorded per block for the
 * merge's check. rws = r w 2^(E_b - xl), emission factor 2^(xl - y) = fa fb. */
static inline __attribute__((always_inline)) void
lane_entry(thread_t *th, const group_t *g, int64_t b, int64_t ipos, int first, int descending, const vd *dec_prev,
           const vd *add_prev, const vd *add_cur, vd *t, vd *ell, int64_t *xl, vd *rws, vd *fa, vd *fb) {
  /* (vectors by pointer: the callers are compiled for several ISAs, whose ABIs for passing
   * 64-byte vectors by value differ) */
  const problem_t *pb = th->pb;
  /* a block holding only position 0 feeds nothing into a descending sweep (and there S = 0,
   * c = q, would set a needlessly large scale) */
  const int64_t eb = ipos == 0 && descending ? EMPTY : th->ex[b];
  if (!first) *ell = *ell * *dec_prev + *add_prev;
  const vd c = c_at(pb, g, ipos);
  if (g->all_active && eb != EMPTY) {
    /* Fast path (SIMD, no rescale): every lane holds a carry and keeps its scale. */
    vi x;
    memcpy(&x, xl, sizeof x);
    const vi et = vexpo(*t), ei = eb + g->rwev + vexpo(c) - x; /* relative to xl */
    const vi rt = et + g->erv;
    const vi gt = rt > ei;
    const vi xn = (rt & gt) | (ei & ~gt);
    const vi ok = (*t != 0.0) & (xn >= -64) & (xn <= 8) & (g->rwev + eb - x >= -1000) & (g->rwev + eb - x <= 1000);
    int all = 1;
    for (int k = 0; k < HB; ++k) all &= ok[k] != 0;
    if (all) {
      *rws = g->rwmv * vpow2(g->rwev + eb - x);
      const vi gt2 = et > ei;
      const vi hi = x + ((et & gt2) | (ei & ~gt2));
      int64_t top = hi[0];
      for (int k = 1; k < HB; ++k) top = imax(top, hi[k]);
      raise_y(th, b, top);
      const vi d = x - th->y[b];
      int fine = 1;
      for (int k = 0; k < HB; ++k) fine &= d[k] >= -1022;
      if (fine) {
        *fa = vsplat(1.0);
        *fb = vpow2(d);
        const vi lxv = x + vexpo(*ell + *add_cur);
        int64_t lx = lxv[0];
        for (int k = 1; k < HB; ++k) lx = imax(lx, lxv[k]);
        add_loss(th, b, 1.0, lx + 3);
        return;
      }
    }
  }
  int64_t top = EMPTY;
  for (int k = 0; k < HB; ++k) {
    (*rws)[k] = 0.0;
    if (g->rwm[k] == 0.0) {
      (*t)[k] = 0.0;
      (*ell)[k] = 0.0;
      xl[k] = EMPTY;
      continue;
    }
    const double tk = (*t)[k];
    const int64_t et = tk != 0.0 ? xl[k] + expo(fabs(tk)) : EMPTY;
    const int64_t ei = eb != EMPTY ? eb + g->rwe[k] + expo(c[k]) : EMPTY;
    /* the carry is multiplied by r before the block's first term joins it: r t >= 2^(et+er) */
    const int64_t xn = imax(et == EMPTY ? EMPTY : et + g->er[k], ei);
    if (xn == EMPTY) continue; /* nothing in this lane here; keep its scale for ell */
    top = imax(top, imax(et, ei)); /* emissions stay below 2^top */
    if (xl[k] == EMPTY) {
      (*ell)[k] = 0.0;
      xl[k] = xn;
    } else if (xn > xl[k] + 8 || xn < xl[k] - 64) {
      /* rescale (within 2^-64 .. 2^8 of the target the scale is kept: values stay far above
       * what may be flushed, 2^-1022 of the scale) */
      const int64_t sh = xl[k] - xn;
      (*t)[k] = scale2(tk, sh);
      if (sh < 0) {
        (*ell)[k] = scale2((*ell)[k], sh) + 0x1p-1021;
      } else {
        const double l = scale2((*ell)[k], sh);
        (*ell)[k] = l < 0x1p1000 ? l : 0x1p1000;
      }
      xl[k] = xn;
    }
    if (eb != EMPTY) (*rws)[k] = scale2(g->rwm[k], g->rwe[k] + eb - xl[k]);
  }
  if (top != EMPTY) raise_y(th, b, top);
  const int64_t y = th->y[b];
  int64_t lx = EMPTY; /* the block's recorded loss: 8 lanes below 2^lx each */
  for (int k = 0; k < HB; ++k) {
    (*fa)[k] = 1.0;
    (*fb)[k] = 0.0;
    if (xl[k] == EMPTY) continue;
    lx = imax(lx, xl[k] + expo((*ell)[k] + (*add_cur)[k]));
    if ((*t)[k] == 0.0 && (*rws)[k] == 0.0) continue; /* emits nothing in this block */
    const int64_t d = xl[k] - y;                       /* <= 8 */
    if (d >= -1022) {
      (*fb)[k] = pow2i(d);
    } else {
      (*fa)[k] = 0x1p-500;
      (*fb)[k] = pow2i(d + 500);
    }
  }
  if (lx != EMPTY) add_loss(th, b, 1.0, lx + 3);
}

/* Emission of a carry: mode 0 (linear mode) t, 1: t 2^(xl - y) = t fb, 2: (t fa) fb (some
 * lane's 2^(xl - y) below the normal range). mode is a constant at every call site. */
static inline __attribute__((always_inline)) double emit(vd t, vd fa, vd fb, int mode) {
  if (mode == 0) return hsum(t);
  if (mode == 1) return hsum(t * fb);
  return hsum((t * fa) * fb);
}

/* Descending sweep over [lo, j] with a fixed span: the two loops of sweep_down. */
static inline __attribute__((always_inline)) vd
down_span(const group_t *g, const span_t *sp, int64_t j, int64_t lo, int64_t K, vd t, vd rws, vd fa,
          vd fb, const double *mant, double *out, double *abar, int mode) {
  const vd r = g->r, q = g->q, w = g->w;
  if (sp->past_const && !sp->fut) {
    const vd a = g->alpha_c, wa = w * a, rwqa = rws * (q * a);
    const double wasum = hsum(wa);
    for (int64_t i = j; i >= lo; --i) {
      abar[i] += wasum;
      out[i] += emit(t, fa, fb, mode);
      t = r * t + rwqa * mant[i];
    }
  } else {
    /* u = (r w 2^(E_b - xl)) (q alpha) M: q alpha = c = 1/(1/q + S) is moderate even
     * where q ~ e^600 and alpha ~ e^-600, so no intermediate leaves the float64 range. */
    for (int64_t i = j; i >= lo; --i) {
      const vd a = 1.0 / (1.0 + q * span_s(g, sp, i, K));
      abar[i] += hsum(w * a);
      out[i] += emit(t, fa, fb, mode);
      t = r * t + (rws * (q * a)) * mant[i];
    }
  }
  return t;
}

/* Descending sweep: alphabar and back_j (A_j with a window). */
HOT static void sweep_down(thread_t *th, const group_t *g) {
  const problem_t *pb = th->pb;
  const int64_t n = pb->n, B = pb->block, K = pb->bidir, L = pb->window_l;
  const double *mant = th->mant;
  double *out = th->out, *abar = th->abar;
  const vd r = g->r, w = g->w;
  /* lane_entry works on memory copies (tm, rwsm, fam, fbm); the loops use register copies:
   * a vector whose address is taken may alias out[] and would be reloaded every token */
  vd tm = vsplat(0.0), ell = vsplat(0.0);
  int64_t xl[HB];
  for (int k = 0; k < HB; ++k) xl[k] = EMPTY;
  for (int64_t b = pb->nb - 1; b >= 0; --b) {
    const int64_t b0 = b * B, b1 = imin(n, b0 + B);
    vd rwsm = r * w, fam = vsplat(1.0), fbm = vsplat(1.0);
    if (pb->ext) {
      const int top = b == pb->nb - 1, prev_top = b + 1 == pb->nb - 1;
      const int reset = pb->windowed && b1 % L == 0; /* the carry restarts at the block's top */
      if (reset) {
        tm = vsplat(0.0);
        ell = vsplat(0.0);
        for (int k = 0; k < HB; ++k) xl[k] = EMPTY;
      }
      lane_entry(th, g, b, b1 - 1, top || reset, 1, prev_top ? &g->dec_top : &g->dec_full,
                 prev_top ? &g->add_top : &g->add_full, top ? &g->add_top : &g->add_full, &tm, &ell, xl,
                 &rwsm, &fam, &fbm);
    }
    const vd rws = rwsm, fa = fam, fb = fbm;
    int mode = 0;
    if (pb->ext) {
      mode = 1;
      for (int k = 0; k < HB; ++k) mode = fa[k] != 1.0 ? 2 : mode;
    }
    vd t = tm;
    int64_t j = b1 - 1;
    while (j >= b0) {
      if (pb->windowed && (j + 1) % L == 0) { /* segment end: A_j = 0 */
        t = vsplat(0.0);
        ell = vsplat(0.0);
      }
      span_t sp;
      int64_t lo = imax(b0, span_setup(pb, g, j, 1, &sp));
      if (pb->windowed) lo = imax(lo, (j / L) * L);
      if (mode == 0) t = down_span(g, &sp, j, lo, K, t, rws, fa, fb, mant, out, abar, 0);
      else if (mode == 1) t = down_span(g, &sp, j, lo, K, t, rws, fa, fb, mant, out, abar, 1);
      else t = down_span(g, &sp, j, lo, K, t, rws, fa, fb, mant, out, abar, 2);
      j = lo - 1;
    }
    tm = t;
  }
}

/* Ascending sweep over e < K: fwd_e. */
HOT static void sweep_up_bidir(thread_t *th, const group_t *g) {
  const problem_t *pb = th->pb;
  const int64_t n = pb->n, B = pb->block, K = imin(pb->bidir, pb->n);
  const double *mant = th->mant;
  double *out = th->out;
  const vd r = g->r, q = g->q;
  vd tm = vsplat(0.0), ell = vsplat(0.0); /* memory copies for lane_entry (see sweep_down) */
  int64_t xl[HB];
  for (int k = 0; k < HB; ++k) xl[k] = EMPTY;
  for (int64_t b = 0; b * B < K; ++b) {
    const int64_t b0 = b * B, b1 = imin(K, imin(n, b0 + B));
    vd rwsm = r * g->w, fam = vsplat(1.0), fbm = vsplat(1.0);
    if (pb->ext) { /* every block before the last is full */
      lane_entry(th, g, b, b0, b == 0, 0, &g->dec_full, &g->add_full, &g->add_full, &tm, &ell, xl, &rwsm,
                 &fam, &fbm);
    }
    const vd rws = rwsm, fa = fam, fb = fbm;
    int mode = 0;
    if (pb->ext) {
      mode = 1;
      for (int k = 0; k < HB; ++k) mode = fa[k] != 1.0 ? 2 : mode;
    }
    vd t = tm;
    int64_t e = b0;
    while (e < b1) {
      span_t sp;
      const int64_t hi = imin(b1, span_setup(pb, g, e, 0, &sp));
#define UP_LOOP(MODE)                                          \
  for (int64_t i = e; i < hi; ++i) {                           \
    const vd a = 1.0 / (1.0 + q * span_s(g, &sp, i, K));       \
    out[i] += emit(t, fa, fb, MODE);                           \
    t = r * t + (rws * (q * a)) * mant[i];                     \
  }
      if (mode == 0) { UP_LOOP(0) } else if (mode == 1) { UP_LOOP(1) } else { UP_LOOP(2) }
#undef UP_LOOP
      e = hi;
    }
    tm = t;
  }
}

/* Ascending window sweep: C_{e-L} = sum_{i = seg start}^{e} r^{L-(e-i)} u_i, e >= L. */
HOT static void sweep_up_window(thread_t *th, const group_t *g) {
  /* Each lane's C has its own exponent ce[k] (lanes grow at different rates r^{-1}). The
   * mantissa starts every span in [1/2, 1) (or at the scale of the largest entering term
   * r^L u <= rlm wqm 2^te, te = rle + wqe + E_b, w q alpha = wqm 2^wqe) and grows by at most 2^C_HEADROOM within a
   * span (ks tokens), so it never overflows; entering terms that underflow are below
   * 2^-1022 of C itself, and stay so since all of C grows at the same rate. */
  const problem_t *pb = th->pb;
  const int64_t n = pb->n, B = pb->block, L = pb->window_l;
  const int64_t end = ((n + L - 1) / L) * L; /* e runs to the end of the last segment */
  const double *mant = th->mant;
  double *out = th->out;
  const vd rho = g->rho;
  /* cl: what C may have lost, in units of 2^(ce - CL_SHIFT) (extended mode): a loss far below
   * 2^-1022 of C's scale still grows with C by up to 2^C_HEADROOM per span */
  vd c = vsplat(0.0), cl = vsplat(0.0);
  int64_t ce[HB];
  for (int k = 0; k < HB; ++k) ce[k] = EMPTY;
  for (int64_t e = L; e < end;) {
    if (e % L == 0) { /* segment start: C restarts */
      c = vsplat(0.0);
      cl = vsplat(0.0);
      for (int k = 0; k < HB; ++k) ce[k] = EMPTY;
    }
    const int64_t be = e / B, bj = (e - L) / B;
    int64_t hi = imin(end, imin((be + 1) * B, (bj + 1) * B + L));
    hi = imin(hi, (e / L + 1) * L);
    hi = imin(hi, e + g->ks);
    const int64_t eb = e < n ? th->ex[be] : EMPTY;
    vd tf = vsplat(0.0), flush = vsplat(0.0), rho1 = rho;
    int64_t need = EMPTY; /* exponent of the largest value this span can start from */
    for (int k = 0; k < HB; ++k) {
      if (eb != EMPTY && g->wqm[k] > 0.0 && g->rlm[k] > 0.0) {
        const int64_t te = g->rle[k] + g->wqe[k] + eb; /* entering terms r^L u_e <= rlm wqm 2^te */
        if (ce[k] == EMPTY || te > ce[k]) {
          /* a larger term: C's scale follows it, or C's own size after its first growth by
           * r^-1 (which happens before the term joins): C itself is flushed only where it
           * stays below 2^-1022 of the sum it joins */
          int64_t cn = te;
          if (ce[k] != EMPTY && c[k] != 0.0) cn = imax(te, ce[k] + expo(fabs(c[k])) + expo(rho[k]) - 1);
          if (ce[k] != EMPTY) {
            /* grow C (and cl) by r^-1 first, in its old scale (|c| < 1, no overflow), then
             * rescale: what flushes now stays below 2^-1022 of the new sum */
            const double c0 = c[k] * rho[k];
            c[k] = scale2(c0, ce[k] - cn);
            cl[k] = scale2(cl[k] * rho[k], ce[k] - cn) + 0x1p-1021;
            if (c0 != 0.0 && fabs(c[k]) < DBL_MIN) cl[k] += scale2(2.0 * fabs(c0), ce[k] - cn + CL_SHIFT);
            rho1[k] = 1.0; /* already grown for the span's first token */
          } else {
            cl[k] = 0.0;
          }
          ce[k] = cn;
        }
        tf[k] = scale2(g->rlm[k] * g->wqm[k], te - ce[k]);
        flush[k] = pow2i(CL_SHIFT - 1021); /* tf M may underflow */
        need = imax(need, te + expo(g->rlm[k] * g->wqm[k]));
      }
      if (c[k] != 0.0) need = imax(need, ce[k] + expo(fabs(c[k])));
    }
    /* Emission c 2^(ce - y) as (c fa) fb: where 2^(ce - y) is below the normal range,
     * fa = 2^-C_HEADROOM first (c < 2^C_HEADROOM), so no representable value is lost. */
    vd fa = vsplat(1.0), fb = vsplat(0.0);
    if (need != EMPTY) {
      if (pb->ext) raise_y(th, bj, need);
      const int64_t y = pb->ext ? th->y[bj] : 0;
      for (int k = 0; k < HB; ++k) {
        if (ce[k] == EMPTY) continue;
        if (ce[k] - y >= -1022) {
          fb[k] = pow2i(ce[k] - y);
        } else {
          fa[k] = pow2i(-C_HEADROOM);
          fb[k] = pow2i(ce[k] - y + C_HEADROOM);
        }
      }
    }
    const int64_t hin = imin(hi, n);
    int64_t i = e;
    /* cl may grow by r^-ks <= 2^1011 in this span: cap it first at 2^12 units (2^-88 of C's
     * scale, already far above what any entry may carry: a conservative bound) */
    for (int k = 0; k < HB; ++k) cl[k] = cl[k] < 0x1p12 ? cl[k] : 0x1p12;
    { /* the span's first token (rho1: lanes grown above are not grown again) */
      c = rho1 * c + (i < hin ? tf * mant[i] : vsplat(0.0));
      if (pb->ext) cl = rho1 * cl + flush;
      out[i - L] += hsum((c * fa) * fb);
      ++i;
    }
    if (pb->ext) {
      /* an entering term or a sum flushed: < 2^-1021 of C's scale, growing with C */
      for (; i < hin; ++i) {
        c = rho * c + tf * mant[i];
        cl = rho * cl + flush;
        out[i - L] += hsum((c * fa) * fb);
      }
    } else {
      for (; i < hin; ++i) {
        c = rho * c + tf * mant[i];
        out[i - L] += hsum((c * fa) * fb);
      }
    }
    for (; i < hi; ++i) { /* past the last token: u = 0 */
      c = rho * c;
      cl = rho * cl;
      out[i - L] += hsum((c * fa) * fb);
    }
    if (pb->ext) { /* this span's emissions (block bj) carry at most cl 2^ce per lane */
      int64_t lx = EMPTY;
      for (int k = 0; k < HB; ++k) lx = ce[k] != EMPTY && cl[k] > 0.0 ? imax(lx, ce[k]) : lx;
      if (lx != EMPTY) {
        double m = 0.0;
        for (int k = 0; k < HB; ++k) {
          if (ce[k] != EMPTY && cl[k] > 0.0) m += scale2(cl[k], ce[k] - lx) + 0x1p-1020;
        }
        add_loss(th, bj, m, lx - CL_SHIFT);
      }
    }
    for (int k = 0; k < HB; ++k) { /* back to |c| in [1/2, 1) */
      if (c[k] != 0.0) {
        const int64_t sh = expo(fabs(c[k]));
        c[k] = scale2(c[k], -sh);
        cl[k] = scale2(cl[k], -sh);
        ce[k] += sh;
      }
    }
    e = hi;
  }
}

/* Merge the threads' buffers into v for blocks [blk0, blk1); 0 or an error code. */
static int merge(thread_t *th, int64_t layer, double lam, int64_t lo_new, thread_t *all) {
  problem_t *pb = th->pb;
  const int64_t n = pb->n, B = pb->block, nt = pb->nthreads;
  double amin = INFINITY;
  if (!pb->ext) {
    for (int64_t j = th->id * n / nt; j < (th->id + 1) * n / nt; ++j) {
      double a = 0.0, o = 0.0;
      for (int64_t k = 0; k < nt; ++k) { a += all[k].abar[j]; o += all[k].out[j]; }
      if (a < amin) amin = a;
      if (j == n - 1) pb->last_self[layer] = a;
      const double v = (1.0 - lam + lam * a) * th->mant[j] + lam * o;
      th->next_mant[j] = v;
      if (j >= lo_new && !(v >= pb->guard)) { /* guarded mode: too close to underflow (or NaN) */
        th->err_code = POSBIAS_ERR_RANGE;
        th->err_layer = layer;
        th->err_pos = j;
        return POSBIAS_ERR_RANGE;
      }
    }
    pb->part_min[layer * nt + th->id] = amin;
    return 0;
  }
  /* lambda = lm 2^le exactly (bits: a subnormal lambda is not read as 0 here). */
  double lm = 0.0;
  int64_t le = 0;
  {
    uint64_t bits;
    memcpy(&bits, &lam, sizeof bits);
    const int64_t biased = (int64_t)((bits >> 52) & 0x7ff);
    const uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
    if (biased > 0) {
      lm = lam * pow2i(-(biased - 1022));
      le = biased - 1022;
    } else if (frac != 0) {
      int p = 51;
      while (!((frac >> p) & 1)) --p;
      lm = (double)frac * pow2i(-(p + 1));
      le = p - 1073;
    }
  }
  for (int64_t b = th->blk0; b < th->blk1; ++b) {
    const int64_t b0 = b * B, b1 = imin(n, b0 + B), eb = th->ex[b];
    /* The threads' out in the scale of the largest actual entry (not of the scales Y_b
     * they were accumulated in), so that merging loses < 2^-1022 of that entry. */
    int64_t ymx = nt == 1 ? all[0].y[b] : EMPTY; /* one thread: nothing to merge */
    for (int64_t k = 0; k < nt && nt > 1; ++k) {
      if (all[k].y[b] == EMPTY) continue;
      double mo = 0.0;
      for (int64_t j = b0; j < b1; ++j) mo = all[k].out[j] > mo ? all[k].out[j] : mo;
      if (mo > 0.0) ymx = imax(ymx, all[k].y[b] + expo(mo));
    }
    double ofa[MAX_THREADS], ofb[MAX_THREADS];
    for (int64_t k = 0; k < nt; ++k) {
      ofa[k] = 1.0;
      ofb[k] = 0.0;
      if (all[k].y[b] == EMPTY || ymx == EMPTY) continue;
      const int64_t dk = all[k].y[b] - ymx; /* <= 1021: entries are normal numbers */
      if (dk >= -1022) {
        ofb[k] = pow2i(dk);
      } else {
        ofa[k] = 0x1p-200;
        ofb[k] = pow2i(dk + 200);
      }
    }
    /* Pass 1: own = (1 - lambda + lambda abar) M (scale 2^E_b) and lm o (scale 2^(ymx + le)),
     * each kept in its own scale; o is parked in this thread's out (only this thread reads
     * these positions). */
    double mo = 0.0, mt = 0.0;
    for (int64_t j = b0; j < b1; ++j) {
      double a = 0.0, o = 0.0;
      for (int64_t k = 0; k < nt; ++k) {
        a += all[k].abar[j];
        o += (all[k].out[j] * ofa[k]) * ofb[k];
      }
      if (a < amin) amin = a;
      if (j == n - 1) pb->last_self[layer] = a;
      double own = (1.0 - lam + lam * a) * th->mant[j], t2 = lm * o;
      if (j < lo_new) own = t2 = 0.0;
      th->next_mant[j] = own;
      th->out[j] = t2;
      mo = own > mo ? own : mo;
      mt = t2 > mt ? t2 : mt;
      if (!(own <= DBL_MAX) || !(t2 <= DBL_MAX)) {
        th->err_code = POSBIAS_ERR_NONFINITE;
        th->err_layer = layer;
        th->err_pos = j;
        return POSBIAS_ERR_NONFINITE;
      }
    }
    int64_t W = EMPTY;
    if (mo > 0.0) W = eb + expo(mo);
    if (mt > 0.0) W = imax(W, ymx + le + expo(mt));
    if (W == EMPTY) { /* nothing in this block */
      th->next_ex[b] = EMPTY;
      if (b1 - 1 >= lo_new) {
        th->err_code = POSBIAS_ERR_RANGE;
        th->err_layer = layer;
        th->err_pos = imax(b0, lo_new);
        return POSBIAS_ERR_RANGE;
      }
      continue;
    }
    /* What may have been lost, in the scale 2^W, times 2^RANGE_MARGIN:
     *   base: the final sum's own flushes (< 2^-1022 each);
     *   lam (sum_k [carry losses recorded by the sweeps]_k + (64 groups_k + 64) 2^(Y_k-1022)
     *        + 2^(ymx - 1022) nt): the threads' lanes and sums flushed below 2^-1022 of their
     *        scales, and the merge of the threads;
     *   own: 2^(E_b - 1022) where (1 - lambda + lambda abar) M itself underflowed.
     * An entry must stand above all of it: then its relative error is < 2^-RANGE_MARGIN. */
    const double base = pow2i(-1021 + RANGE_MARGIN);
    double tloss = 0.0;
    if (lm > 0.0) {
      const int64_t sc = le + RANGE_MARGIN - W;
      for (int64_t k = 0; k < nt; ++k) {
        if (all[k].y[b] != EMPTY) {
          tloss += scale2((double)(64 * (all[k].g1 - all[k].g0) + 64), all[k].y[b] - 1022 + sc);
        }
        if (all[k].lossm[b] > 0.0) tloss += scale2(all[k].lossm[b], all[k].losse[b] + sc);
      }
      if (ymx != EMPTY && nt > 1) tloss += scale2((double)nt, ymx - 1022 + sc);
      tloss *= lm;
    }
    const double ownloss = eb == EMPTY ? 0.0 : scale2(1.0, eb - 1022 + RANGE_MARGIN - W);
    const int64_t dof = eb == EMPTY ? 0 : eb - W, dt = ymx == EMPTY ? 0 : ymx + le - W;
    const int fast = dof >= -1022 && dof <= 1023 && dt >= -1022 && dt <= 1023;
    const double fo = fast ? pow2i(dof) : 0.0, ft = fast ? pow2i(dt) : 0.0;
    double mx = 0.0;
    for (int64_t j = b0; j < b1; ++j) {
      const double own = th->next_mant[j], t2 = th->out[j];
      const double va = fast ? own * fo : scale2(own, dof), vb = fast ? t2 * ft : scale2(t2, dt);
      const double v = va + vb;
      th->next_mant[j] = v;
      if (!(v <= DBL_MAX)) {
        th->err_code = POSBIAS_ERR_NONFINITE;
        th->err_layer = layer;
        th->err_pos = j;
        return POSBIAS_ERR_NONFINITE;
      }
      if (j >= lo_new) {
        /* base where one of the two terms was flushed here */
        const double flushed = ((own > 0.0 && va < DBL_MIN) || (t2 > 0.0 && vb < DBL_MIN)) ? base : 0.0;
        const double lim = flushed + tloss + ((own < 0x1p-1021 && th->mant[j] > 0.0) ? ownloss : 0.0);
        if (!(v > 0.0 && v >= lim)) {
          th->err_code = POSBIAS_ERR_RANGE;
          th->err_layer = layer;
          th->err_pos = j;
          return POSBIAS_ERR_RANGE;
        }
      }
      if (v > mx) mx = v;
    }
    const int64_t sh = expo(mx);
    if (sh != 0) {
      const double f = pow2i(-sh); /* |sh| <= 1: v < 2 */
      for (int64_t j = b0; j < b1; ++j) th->next_mant[j] *= f;
    }
    th->next_ex[b] = W + sh;
  }
  pb->part_min[layer * nt + th->id] = amin;
  return 0;
}

static int64_t support_after(const problem_t *pb, int64_t lo, double lam) {
  uint64_t bits; /* lambda == 0 by its bits: the workers read a subnormal lambda as 0 (DAZ) */
  memcpy(&bits, &lam, sizeof bits);
  if ((bits << 1) == 0) return lo;
  if (pb->bidir > 1 && lo < pb->bidir) return 0;
  if (pb->windowed) return pb->window_l == 0 ? lo : imax(0, lo - pb->window_l);
  return 0;
}

static void *worker(void *arg) {
  thread_t *th = arg;
  problem_t *pb = th->pb;
  thread_t *all = th - th->id;
  if (th->id > 0) { /* wait until every thread exists (or the start was abandoned) */
    pthread_mutex_lock(&pb->gate_lock);
    while (pb->go == 0) pthread_cond_wait(&pb->gate, &pb->gate_lock);
    const int go = pb->go;
    pthread_mutex_unlock(&pb->gate_lock);
    if (go < 0) return NULL;
  }
#if defined(__x86_64__) || defined(__i386__)
  /* Flush subnormals to zero (FTZ | DAZ): underflowed values become exact zeros, and no
   * operation takes the slow subnormal path. Restored before returning. */
  const unsigned int csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
#endif
  int64_t lo = pb->support_lo;
  const size_t nbytes = (size_t)pb->n * sizeof(double);
  int cur = 0; /* the input of the current layer is buffer cur; a failed layer leaves it intact */
  for (int64_t layer = pb->nlayers - 1; layer >= 0; --layer) {
    const double lam = pb->lambdas[layer];
    th->mant = pb->mant_buf[cur];
    th->ex = pb->ex_buf[cur];
    th->next_mant = pb->mant_buf[1 - cur];
    th->next_ex = pb->ex_buf[1 - cur];
    const int64_t lo_new = support_after(pb, lo, lam);
    memset(th->out, 0, nbytes);
    memset(th->abar, 0, nbytes);
    for (int64_t b = 0; b < pb->nb; ++b) th->y[b] = pb->ext ? EMPTY : 0;
    memset(th->lossm, 0, (size_t)pb->nb * sizeof(double));
    for (int64_t gi = th->g0; gi < th->g1; ++gi) {
      group_t *g = &th->groups[gi - th->g0];
      group_setup(pb, g, gi, layer);
      if (pb->windowed && pb->window_l == 0) { /* w = 1: every row reads only itself */
        for (int64_t j = 0; j < pb->n; ++j) th->abar[j] += hsum(g->w);
        continue;
      }
      if (!g->active) continue;
      sweep_down(th, g);
      if (pb->bidir > 1) sweep_up_bidir(th, g);
      if (pb->windowed) sweep_up_window(th, g);
    }
    pthread_barrier_wait(&pb->barrier);
    if (merge(th, layer, lam, lo_new, all) != 0) pb->error = 1;
    pthread_barrier_wait(&pb->barrier);
    if (pb->error) break;
    lo = lo_new;
    cur = 1 - cur;
  }
  if (th->id == 0) pb->final_buf = cur;
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(csr);
#endif
  return NULL;
}

/* The whole profile: applies layers nlayers-1 .. 0 of the given arrays to v = M 2^E in place.
 *   lambdas (nlayers,), slopes/diag/weights (nlayers, heads), row-major float64;
 *   past_window: w >= 1, or 0 for none; bidir: K (0 or 1: none); block: B (extended mode);
 *   ext: 0 linear, 1 extended range (block floating point), 2 guarded linear: linear, but a
 *   layer that leaves a support entry below GUARD = 2^-900 fails with POSBIAS_ERR_RANGE (the
 *   caller continues from the state above it in extended range);
 *   mant (n,), ex (ceil(n/B),) int64 (all 0 in linear mode); support_lo: in/out;
 *   min_self, last_self (nlayers,); info (4,) int64: {code, layer, position, block}.
 * Returns 0 or an error code (POSBIAS_ERR_*). On POSBIAS_ERR_RANGE / _NONFINITE at layer
 * info[1], mant/ex/support_lo/min_self/last_self hold the result of the layers above it
 * (nlayers-1 .. info[1]+1): the caller may refine the blocks and continue from there. */
int posbias_profile(int64_t n, int64_t heads, int64_t nlayers, const double *lambdas, const double *slopes,
                    const double *diag, const double *weights, int64_t past_window, int64_t bidir,
                    int64_t block, int64_t ext, int64_t nthreads, double *mant, int64_t *ex,
                    int64_t *support_lo, double *min_self, double *last_self, int64_t *info) {
  info[0] = info[1] = info[2] = info[3] = -1;
  if (n < 1 || heads < 1 || nlayers < 0 || block < 1 || nthreads < 1 || past_window < 0 || bidir < 0 ||
      ext < 0 || ext > 2) {
    info[0] = POSBIAS_ERR_ARGS;
    return POSBIAS_ERR_ARGS;
  }
  if (nlayers == 0) { info[0] = 0; return 0; }
  problem_t pb;
  memset(&pb, 0, sizeof pb);
  pb.n = n;
  pb.heads = heads;
  pb.nlayers = nlayers;
  pb.lambdas = lambdas;
  pb.slopes = slopes;
  pb.diag = diag;
  pb.weights = weights;
  pb.windowed = past_window > 0 && past_window - 1 < n - 1;
  pb.window_l = pb.windowed ? past_window - 1 : 0;
  pb.bidir = bidir > 1 ? imin(bidir, n) : 0;
  if (pb.windowed && pb.bidir > 1) {
    info[0] = POSBIAS_ERR_ARGS;
    return POSBIAS_ERR_ARGS;
  }
  pb.ext = ext == 1;
  pb.guard = ext == 2 ? GUARD : 0.0;
  pb.block = pb.ext ? block : n; /* linear mode: one block */
  pb.nb = (n + pb.block - 1) / pb.block;
  pb.ngroups = (heads + HB - 1) / HB;
  pb.nthreads = imin(nthreads, MAX_THREADS);
  pb.mant_buf[0] = mant;
  pb.ex_buf[0] = ex;
  pb.mant_buf[1] = amalloc((size_t)n * sizeof(double));
  pb.ex_buf[1] = malloc((size_t)pb.nb * sizeof(int64_t));
  pb.support_lo = *support_lo;
  pb.min_self = min_self;
  pb.last_self = last_self;
  const int64_t nt = pb.nthreads;
  int rc = POSBIAS_OK;
  int64_t reach = imax(n, pb.bidir);
  thread_t *ths = calloc((size_t)nt, sizeof(thread_t));
  pthread_t *tids = calloc((size_t)nt, sizeof(pthread_t));
  pb.part_min = malloc((size_t)(nlayers * nt) * sizeof(double));
  if (!ths || !tids || !pb.part_min || !pb.mant_buf[1] || !pb.ex_buf[1]) {
    free(ths); free(tids); free(pb.part_min); free(pb.mant_buf[1]); free(pb.ex_buf[1]);
    info[0] = POSBIAS_ERR_MEMORY;
    return POSBIAS_ERR_MEMORY;
  }
  memcpy(pb.ex_buf[1], ex, (size_t)pb.nb * sizeof(int64_t)); /* linear mode never rewrites it */
  int ok = 1;
  for (int64_t k = 0; k < nt; ++k) {
    thread_t *th = &ths[k];
    th->pb = &pb;
    th->id = k;
    th->g0 = k * pb.ngroups / nt;
    th->g1 = (k + 1) * pb.ngroups / nt;
    th->blk0 = k * pb.nb / nt;
    th->blk1 = (k + 1) * pb.nb / nt;
    th->out = amalloc((size_t)n * sizeof(double));
    th->abar = amalloc((size_t)n * sizeof(double));
    th->y = malloc((size_t)pb.nb * sizeof(int64_t));
    th->lossm = malloc((size_t)pb.nb * sizeof(double));
    th->losse = malloc((size_t)pb.nb * sizeof(int64_t));
    const size_t gbytes = (size_t)imax(1, th->g1 - th->g0) * sizeof(group_t);
    th->groups = amalloc(gbytes); /* vd members need 64-byte alignment */
    if (th->groups) memset(th->groups, 0, gbytes);
    if (!th->out || !th->abar || !th->y || !th->lossm || !th->losse || !th->groups) { ok = 0; continue; }
    for (int64_t gi = th->g0; gi < th->g1; ++gi) {
      if (!tables_alloc(&th->groups[gi - th->g0].tb, reach)) ok = 0;
    }
  }
  if (!ok) rc = POSBIAS_ERR_MEMORY;
  if (rc == POSBIAS_OK) {
    pthread_barrier_init(&pb.barrier, NULL, (unsigned)nt);
    pthread_mutex_init(&pb.gate_lock, NULL);
    pthread_cond_init(&pb.gate, NULL);
    int64_t started = 0;
    for (int64_t k = 1; k < nt; ++k) {
      if (pthread_create(&tids[k], NULL, worker, &ths[k]) != 0) break;
      ++started;
    }
    pthread_mutex_lock(&pb.gate_lock);
    pb.go = started == nt - 1 ? 1 : -1;
    pthread_cond_broadcast(&pb.gate);
    pthread_mutex_unlock(&pb.gate_lock);
    if (pb.go > 0) worker(&ths[0]);
    else rc = POSBIAS_ERR_THREAD;
    for (int64_t k = 1; k <= started; ++k) pthread_join(tids[k], NULL);
    pthread_cond_destroy(&pb.gate);
    pthread_mutex_destroy(&pb.gate_lock);
    pthread_barrier_destroy(&pb.barrier);
  }
  if (rc == POSBIAS_OK) {
    for (int64_t k = 0; k < nt; ++k) {
      if (ths[k].err_code != 0 && (rc == POSBIAS_OK || ths[k].err_layer > info[1])) {
        rc = ths[k].err_code;
        info[0] = ths[k].err_code;
        info[1] = ths[k].err_layer;
        info[2] = ths[k].err_pos;
        info[3] = ths[k].err_pos / pb.block;
      }
    }
  }
  if (rc == POSBIAS_OK || rc == POSBIAS_ERR_RANGE || rc == POSBIAS_ERR_NONFINITE) {
    /* Layers nlayers-1 .. done were completed (all of them on success); a failed layer
     * left its input intact in buffer final_buf. */
    const int64_t done = rc == POSBIAS_OK ? 0 : info[1] + 1;
    if (pb.final_buf == 1) {
      memcpy(mant, pb.mant_buf[1], (size_t)n * sizeof(double));
      memcpy(ex, pb.ex_buf[1], (size_t)pb.nb * sizeof(int64_t));
    }
    for (int64_t t = done; t < nlayers; ++t) {
      double mn = INFINITY;
      for (int64_t k = 0; k < nt; ++k) {
        if (pb.part_min[t * nt + k] < mn) mn = pb.part_min[t * nt + k];
      }
      min_self[t] = mn;
    }
    int64_t lo = pb.support_lo;
    for (int64_t t = nlayers - 1; t >= done; --t) lo = support_after(&pb, lo, lambdas[t]);
    *support_lo = lo;
    if (rc == POSBIAS_OK) info[0] = 0;
  } else if (info[0] < 0) {
    info[0] = rc;
  }
  for (int64_t k = 0; k < nt; ++k) {
    thread_t *th = &ths[k];
    if (th->groups) {
      for (int64_t gi = th->g0; gi < th->g1; ++gi) tables_free(&th->groups[gi - th->g0].tb);
    }
    free(th->groups);
    free(th->out);
    free(th->abar);
    free(th->y);
    free(th->lossm);
    free(th->losse);
  }
  free(ths);
  free(tids);
  free(pb.part_min);
  free(pb.mant_buf[1]);
  free(pb.ex_buf[1]);
  return rc;
}

/* Many stacks of one shape (n, heads, nlayers, mask) in one call, in linear mode (ext 0) or
 * guarded linear mode (ext 2): stack b reads lambdas[b*nlayers ..], slopes/diag/weights
 * [b*nlayers*heads ..] and writes mant[b*n ..] (v, starting from e_{n-1}), support_lo[b],
 * min_self/last_self[b*nlayers ..] and info[4b ..] exactly as posbias_profile does with one
 * thread (the same arithmetic, so the same bits). Worker threads take stacks in turn; a stack
 * that fails (e.g. the guard) records its code in info and does not stop the others.
 * Returns 0, or POSBIAS_ERR_ARGS / _THREAD for the call as a whole. */
typedef struct {
  int64_t count, n, heads, nlayers, past_window, bidir, ext;
  const double *lambdas, *slopes, *diag, *weights;
  double *mant, *min_self, *last_self;
  int64_t *support_lo, *info;
  int64_t next; /* the next stack to take (atomic) */
} batch_t;

static void *batch_worker(void *arg) {
  batch_t *bt = arg;
  const int64_t per = bt->nlayers * bt->heads;
  for (;;) {
    const int64_t b = __atomic_fetch_add(&bt->next, 1, __ATOMIC_RELAXED);
    if (b >= bt->count) break;
    double *mant = bt->mant + b * bt->n;
    memset(mant, 0, (size_t)bt->n * sizeof(double));
    mant[bt->n - 1] = 1.0;
    int64_t ex = 0;
    bt->support_lo[b] = bt->n - 1;
    posbias_profile(bt->n, bt->heads, bt->nlayers, bt->lambdas + b * bt->nlayers, bt->slopes + b * per,
                    bt->diag + b * per, bt->weights + b * per, bt->past_window, bt->bidir, bt->n, bt->ext, 1,
                    mant, &ex, bt->support_lo + b, bt->min_self + b * bt->nlayers,
                    bt->last_self + b * bt->nlayers, bt->info + 4 * b);
  }
  return NULL;
}

int posbias_profile_batch(int64_t count, int64_t n, int64_t heads, int64_t nlayers, const double *lambdas,
                          const double *slopes, const double *diag, const double *weights, int64_t past_window,
                          int64_t bidir, int64_t ext, int64_t nthreads, double *mant, int64_t *support_lo,
                          double *min_self, double *last_self, int64_t *info) {
  if (count < 0 || n < 1 || heads < 1 || nlayers < 0 || nthreads < 1 || (ext != 0 && ext != 2)) {
    return POSBIAS_ERR_ARGS;
  }
  batch_t bt = {count, n, heads, nlayers, past_window, bidir, ext, lambdas, slopes, diag, weights,
                mant, min_self, last_self, support_lo, info, 0};
  const int64_t nt = imin(imin(nthreads, MAX_THREADS), imax(count, 1));
  pthread_t tids[MAX_THREADS];
  int64_t started = 0;
  for (int64_t k = 1; k < nt; ++k) {
    if (pthread_create(&tids[k], NULL, batch_worker, &bt) != 0) break;
    ++started;
  }
  batch_worker(&bt); /* this thread works too; it returns when every stack is taken */
  for (int64_t k = 1; k <= started; ++k) pthread_join(tids[k], NULL);
  return POSBIAS_OK;
}

/* Test hook: G(n_i) for one slope through the same tables and anchors as the kernel. */
int posbias_geometric(double m, int64_t reach, int64_t count, const int64_t *ns, double *out) {
  tables_t tb;
  memset(&tb, 0, sizeof tb);
  if (!tables_alloc(&tb, reach)) { tables_free(&tb); return POSBIAS_ERR_MEMORY; }
  double mv[HB];
  for (int k = 0; k < HB; ++k) mv[k] = m;
  tables_update(&tb, mv);
  for (int64_t i = 0; i < count; ++i) {
    if (ns[i] < 0 || ns[i] > reach) { tables_free(&tb); return POSBIAS_ERR_ARGS; }
    out[i] = geo_eval1(&tb, 0, ns[i]);
  }
  tables_free(&tb);
  return 0;
}

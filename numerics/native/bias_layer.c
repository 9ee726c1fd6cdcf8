/* Whole-stack rollout profile p = e_{N-1}^T R^(T-1) ... R^(0) for any relative positional bias (C7).
 *
 * Called through ctypes by numerics/native_bias.py (posbias_bias_profile below). The mathematics
 * is the XLA path's (numerics/_bias_scan.py): head h of layer t reads table u = index[t, h] of
 * past logits l(g) = past[u, g] + [g = 0] d (g <= L, the window's reach) and future logits
 * f(g) = future[u, g] (1 <= g, i and j below the bidirectional length K), and column 0 read from
 * row i has logit l(i) + s (the sink); all already divided by the temperature. With the head's
 * largest logit M: e(g) = exp(l(g) - M), ef(g) = exp(f(g) - M), es(i) = exp(l(i) + s - M), and
 * from the cumulative weights W(a) = sum_{g <= a} e(g), W_f(a) = sum_{1 <= g <= a} ef(g):
 *     Z_i = W(i - 1) + es(i) + W_f(f_i)  (i <= L),   Z_i = W(L) + W_f(f_i)  (i > L),
 * f_i = max(K - 1 - i, 0). With u_i = w v_i / Z_i the head adds to (vA)_j
 *     sum_{g = 0}^{min(L, N-1-j)} u_{j+g} e(g)  (j >= 1),  sum_{i <= L} u_i es(i)  (j = 0),
 *     + [j < K] sum_{g = 1}^{j} u_{j-g} ef(g),
 * so a layer costs O(H N L) multiply-adds (O(H N^2) without a window) and O(N) memory per
 * thread; no N x N matrix, no subtraction (every term and every sum is non-negative, relative
 * error O(N eps) per entry). Heads are split statically across pthreads; each thread
 * accumulates into its own (N,) buffers, merged at the end of every layer in thread order
 * (results differ between thread counts only by the order of that final sum, a few ulps).
 * Subnormals are flushed to zero (FTZ/DAZ) in the workers, as in alibi_layer.c.
 * The row deficit max_i (M - c_i) (c_i: row i's largest logit) of every layer is returned so
 * that the caller can bound what fell below 2^-1022 of the head's scale.
 *
 * Extended range (posbias_bias_profile_log): the same recursion with v held as log values, for
 * stacks whose deficit or depth puts entries below 2^-1022. log Z_i comes from running
 * log-sum-exps of the row's logits (a running maximum and a sum scaled to it), the head adds
 *     log (vA)_j  <-  logaddexp(log (vA)_j, LSE_g [log u_{j+g} + l(g)]  (+ the future and sink terms))
 * with log u_i = log w + log v_i - log Z_i and every LSE taken in two passes (its maximum, then
 * the sum of exp(term - maximum) <= its length), and the layer sets
 *     log v_j <- logaddexp(log(1 - lambda) + log v_j, log lambda + log (vA)_j).
 * Every exponential is of a term minus its sum's maximum (<= 0), so nothing that matters
 * underflows: each layer adds an absolute error of O(eps (N + |log v_j|)) to log v_j (the
 * relative error of v_j), whatever its size. Cost: O(H N L) exponentials per layer instead of
 * multiply-adds, four lanes at a time (exp4), 12 to 14 times the linear mode. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exp_taylor.h"
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"
#define MAX_THREADS 64
#define MAX_DEFICIT 600.0 /* as numerics/bias_engine.py: rows further below their head's scale are refused */

enum { OK = 0, ERR_NONFINITE = 2, ERR_MEMORY = 3, ERR_ARGS = 4, ERR_THREAD = 5 };

typedef struct {
  int64_t n, heads, nlayers, ntables, reach, bidir, nthreads;
  const double *lambdas, *diag, *sink, *weights, *past, *future;
  const int64_t *index;
  double *v, *min_self, *last_self, *deficit;
  pthread_barrier_t barrier;
  pthread_mutex_t gate_lock;
  pthread_cond_t gate;
  int go; /* 0: wait, 1: run, -1: the start was abandoned */
  int error;
  int extended; /* 1: v holds log values (head_log, logaddexp merges) */
  struct thread *threads;
} problem_t;

typedef struct thread {
  problem_t *pb;
  int64_t id, h0, h1;
  double *lp, *e, *ef, *es, *z, *u, *out, *self, *fcum, *fpre;
  double deficit;
} thread_t;

/* The dot products are compiled for AVX-512, AVX2+FMA and baseline x86-64, chosen at load time. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif
typedef double v4 __attribute__((vector_size(4 * sizeof(double))));

/* Dot product with eight running sums in two 4-lane vectors (a fixed order whatever the thread). */
HOT static double dot(const double *a, const double *b, int64_t len) {
  v4 s0 = {0.0, 0.0, 0.0, 0.0}, s1 = {0.0, 0.0, 0.0, 0.0};
  int64_t k = 0;
  for (; k + 8 <= len; k += 8) {
    v4 x0, y0, x1, y1;
    memcpy(&x0, a + k, sizeof x0);
    memcpy(&y0, b + k, sizeof y0);
    memcpy(&x1, a + k + 4, sizeof x1);
    memcpy(&y1, b + k + 4, sizeof y1);
    s0 += x0 * y0;
    s1 += x1 * y1;
  }
  double tail = 0.0;
  for (; k < len; ++k) tail += a[k] * b[k];
  const v4 s = s0 + s1;
  return ((s[0] + s[1]) + (s[2] + s[3])) + tail;
}

/* One head of one layer: adds its contribution to th->out and its self-weights to th->self. */
static void head(thread_t *th, int64_t layer, int64_t h) {
  const problem_t *pb = th->pb;
  const int64_t n = pb->n, L = pb->reach, K = pb->bidir;
  const int64_t at = layer * pb->heads + h;
  const double w = pb->weights[at];
  if (!(w > 0.0)) return;
  const double d = pb->diag[at], s = pb->sink[at];
  const double *past = pb->past + pb->index[at] * n, *future = pb->future + pb->index[at] * n;
  double *lp = th->lp, *e = th->e, *ef = th->ef, *es = th->es, *z = th->z, *u = th->u;
  double top = -INFINITY;
  for (int64_t g = 0; g <= L; ++g) {
    lp[g] = past[g] + (g == 0 ? d : 0.0);
    if (lp[g] > top) top = lp[g];
    if (lp[g] + s > top) top = lp[g] + s;
  }
  for (int64_t g = 1; g < K; ++g)
    if (future[g] > top) top = future[g];
  for (int64_t g = 0; g <= L; ++g) {
    e[g] = exp(lp[g] - top);
    es[g] = exp(lp[g] + s - top);
  }
  ef[0] = 0.0;
  double *fcum = th->fcum, *fpre = th->fpre; /* W_f(f) and max_{1 <= g <= f} f(g) */
  fcum[0] = 0.0;
  fpre[0] = -INFINITY;
  for (int64_t g = 1; g < K; ++g) {
    ef[g] = exp(future[g] - top);
    fcum[g] = fcum[g - 1] + ef[g];
    fpre[g] = future[g] > fpre[g - 1] ? future[g] : fpre[g - 1];
  }
  /* Normalisers from the running sums, and each row's largest logit c_i (for the deficit). */
  double cum = 0.0, cmax = -INFINITY, worst = INFINITY, cum_l = 0.0, max_l = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double zi, ci;
    if (i <= L) {
      zi = cum + es[i];
      ci = lp[i] + s > cmax ? lp[i] + s : cmax;
      cum += e[i];
      if (lp[i] > cmax) cmax = lp[i];
      if (i == L) { cum_l = cum; max_l = cmax; }
    } else {
      zi = cum_l;
      ci = max_l;
    }
    if (i < K - 1) {
      const int64_t f = K - 1 - i;
      zi += fcum[f];
      if (fpre[f] > ci) ci = fpre[f];
    }
    z[i] = zi;
    if (ci < worst) worst = ci;
  }
  if (top - worst > th->deficit) th->deficit = top - worst;
  if (!(top - worst <= MAX_DEFICIT)) return; /* the caller refuses this stack (weights would underflow) */
  const double *v = pb->v;
  for (int64_t i = 0; i < n; ++i) {
    u[i] = w * v[i] / z[i];
    th->self[i] += w * (i == 0 ? es[0] : e[0]) / z[i];
  }
  double *out = th->out;
  double first = 0.0;
  for (int64_t i = 0; i <= L; ++i) first += u[i] * es[i];
  out[0] += first;
  for (int64_t j = 1; j < n; ++j) {
    const int64_t len = (n - j < L + 1) ? n - j : L + 1;
    out[j] += dot(u + j, e, len);
  }
  if (K > 1)
    for (int64_t j = 1; j < K; ++j) { /* sum_{g=1}^{j} u_{j-g} ef(g): reversed u against ef */
      double acc = 0.0;
      for (int64_t g = 1; g <= j; ++g) acc += u[j - g] * ef[g];
      out[j] += acc;
    }
}

/* log(e^a + e^b) for a, b in [-inf, inf) (-inf + -inf gives -inf, not NaN). */
static double logaddexp(double a, double b) {
  const double hi = a > b ? a : b, lo = a > b ? b : a;
  if (hi == -INFINITY) return -INFINITY;
  return hi + log1p(exp(lo - hi));
}

/* Running log-sum-exp: the sum is acc * e^top, acc >= 1 once a finite term arrived. */
typedef struct { double top, acc; } lse_t;

static void lse_add(lse_t *r, double x) {
  if (x == -INFINITY) return;
  if (x > r->top) {
    r->acc = r->acc * exp(r->top - x) + 1.0;
    r->top = x;
  } else {
    r->acc += exp(x - r->top);
  }
}

static double lse_value(const lse_t *r) { return r->top == -INFINITY ? -INFINITY : r->top + log(r->acc); }

typedef int64_t i4 __attribute__((vector_size(4 * sizeof(int64_t))));

/* exp(x) for four x <= 0 (x = -inf included): x = n ln2 + r, |r| <= ln2 / 2 (ln2 in two parts,
 * n rounded by the 1.5 * 2^52 shift), e^r by its Taylor polynomial of degree 13 (truncation
 * below 4e-18 relative), 2^n put into the exponent bits; 0 for x < -708 (where e^x is
 * subnormal: the workers flush those to zero anyway). Relative error a few ulps. */
static inline __attribute__((always_inline)) v4 exp4(v4 x) {
  const v4 shift = {0x1.8p52, 0x1.8p52, 0x1.8p52, 0x1.8p52};
  const i4 tiny = x < -708.0;
  x = (v4)((i4)x & ~tiny); /* those lanes computed at x = 0, zeroed below */
  const v4 t = x * 1.4426950408889634 + shift;
  const v4 n = t - shift;
  const v4 r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  const v4 q = POSBIAS_EXP_TAYLOR13(r);
  const i4 bits = ((i4)t - (i4)shift + 1023) << 52; /* 2^n, n in [-1022, 0] */
  return (v4)((i4)(q * (v4)bits) & ~tiny);
}

/* LSE_g (a[g] + b[g]) over g < len, two passes (maximum, then sum of exp(term - maximum)). */
HOT static double lse_dot(const double *a, const double *b, int64_t len) {
  v4 top4 = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t k = 0;
  for (; k + 4 <= len; k += 4) {
    v4 x, y;
    memcpy(&x, a + k, sizeof x);
    memcpy(&y, b + k, sizeof y);
    x += y;
    const i4 up = x > top4;
    top4 = (v4)(((i4)x & up) | ((i4)top4 & ~up));
  }
  double top = top4[0];
  for (int j = 1; j < 4; ++j)
    if (top4[j] > top) top = top4[j];
  for (; k < len; ++k)
    if (a[k] + b[k] > top) top = a[k] + b[k];
  if (top == -INFINITY) return -INFINITY;
  v4 s0 = {0.0, 0.0, 0.0, 0.0};
  k = 0;
  for (; k + 4 <= len; k += 4) {
    v4 x, y;
    memcpy(&x, a + k, sizeof x);
    memcpy(&y, b + k, sizeof y);
    s0 += exp4(x + y - top);
  }
  double acc = (s0[0] + s0[1]) + (s0[2] + s0[3]);
  for (; k < len; ++k) acc += exp(a[k] + b[k] - top);
  return top + log(acc);
}

/* One head of one layer in extended range: pb->v holds log v; adds log contributions to th->out
 * (logaddexp) and linear self-weights to th->self. Buffers: e = l(g), es = l(g) + s, ef = f(g),
 * fcum = log W_f(g), z = log Z_i, u = log u_i. */
static void head_log(thread_t *th, int64_t layer, int64_t h) {
  const problem_t *pb = th->pb;
  const int64_t n = pb->n, L = pb->reach, K = pb->bidir;
  const int64_t at = layer * pb->heads + h;
  const double w = pb->weights[at];
  if (!(w > 0.0)) return;
  const double d = pb->diag[at], s = pb->sink[at], logw = log(w);
  const double *past = pb->past + pb->index[at] * n, *future = pb->future + pb->index[at] * n;
  double *l = th->e, *ls = th->es, *lf = th->ef, *fcum = th->fcum, *z = th->z, *u = th->u;
  for (int64_t g = 0; g <= L; ++g) {
    l[g] = past[g] + (g == 0 ? d : 0.0);
    ls[g] = l[g] + s;
  }
  lf[0] = -INFINITY;
  fcum[0] = -INFINITY;
  lse_t fr = {-INFINITY, 0.0};
  for (int64_t g = 1; g < K; ++g) {
    lf[g] = future[g];
    lse_add(&fr, lf[g]);
    fcum[g] = lse_value(&fr);
  }
  lse_t pr = {-INFINITY, 0.0}; /* log W(i - 1), then log W(L) */
  double logw_l = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double zi;
    if (i <= L) {
      zi = logaddexp(lse_value(&pr), ls[i]);
      lse_add(&pr, l[i]);
      if (i == L) logw_l = lse_value(&pr);
    } else {
      zi = logw_l;
    }
    if (i < K - 1) zi = logaddexp(zi, fcum[K - 1 - i]);
    z[i] = zi;
  }
  const double *v = pb->v;
  for (int64_t i = 0; i < n; ++i) {
    u[i] = v[i] == -INFINITY ? -INFINITY : logw + v[i] - z[i];
    th->self[i] += w * exp((i == 0 ? ls[0] : l[0]) - z[i]);
  }
  double *out = th->out;
  out[0] = logaddexp(out[0], lse_dot(u, ls, L + 1));
  for (int64_t j = 1; j < n; ++j) {
    const int64_t len = (n - j < L + 1) ? n - j : L + 1;
    double term = lse_dot(u + j, l, len);
    if (j < K) { /* sum_{g=1}^{j} u_{j-g} ef(g) */
      double top = -INFINITY, acc = 0.0;
      for (int64_t g = 1; g <= j; ++g)
        if (u[j - g] + lf[g] > top) top = u[j - g] + lf[g];
      if (top > -INFINITY) {
        for (int64_t g = 1; g <= j; ++g) acc += exp(u[j - g] + lf[g] - top);
        term = logaddexp(term, top + log(acc));
      }
    }
    out[j] = logaddexp(out[j], term);
  }
}

static void *worker(void *arg) {
  thread_t *th = arg;
  problem_t *pb = th->pb;
  if (th->id > 0) { /* wait until every thread exists (or the start was abandoned) */
    pthread_mutex_lock(&pb->gate_lock);
    while (pb->go == 0) pthread_cond_wait(&pb->gate, &pb->gate_lock);
    const int go = pb->go;
    pthread_mutex_unlock(&pb->gate_lock);
    if (go < 0) return NULL;
  }
#if defined(__x86_64__) || defined(__i386__)
  const unsigned int csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
#endif
  const int64_t n = pb->n;
  for (int64_t layer = pb->nlayers - 1; layer >= 0; --layer) {
    memset(th->self, 0, (size_t)n * sizeof(double));
    th->deficit = 0.0;
    if (pb->extended) {
      for (int64_t j = 0; j < n; ++j) th->out[j] = -INFINITY;
      for (int64_t h = th->h0; h < th->h1; ++h) head_log(th, layer, h);
    } else {
      memset(th->out, 0, (size_t)n * sizeof(double));
      for (int64_t h = th->h0; h < th->h1; ++h) head(th, layer, h);
    }
    pthread_barrier_wait(&pb->barrier);
    if (th->id == 0) {
      const double lam = pb->lambdas[layer];
      const double log_keep = log1p(-lam), log_lam = log(lam);
      double mn = INFINITY, deficit = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        double acc = pb->extended ? -INFINITY : 0.0, self = 0.0;
        for (int64_t k = 0; k < pb->nthreads; ++k) {
          acc = pb->extended ? logaddexp(acc, pb->threads[k].out[j]) : acc + pb->threads[k].out[j];
          self += pb->threads[k].self[j];
        }
        double next;
        if (pb->extended) {
          next = logaddexp(log_keep + pb->v[j], log_lam + acc);
          if (isnan(next) || next == INFINITY) pb->error = ERR_NONFINITE;
        } else {
          next = (1.0 - lam) * pb->v[j] + lam * acc;
          if (!isfinite(next)) pb->error = ERR_NONFINITE;
        }
        pb->v[j] = next;
        if (self < mn) mn = self;
        if (j == n - 1) pb->last_self[layer] = self;
      }
      for (int64_t k = 0; k < pb->nthreads; ++k)
        if (pb->threads[k].deficit > deficit) deficit = pb->threads[k].deficit;
      pb->min_self[layer] = mn;
      pb->deficit[layer] = deficit;
    }
    pthread_barrier_wait(&pb->barrier);
    if (pb->error) break;
  }
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(csr);
#endif
  return NULL;
}

/* Applies layers nlayers-1 .. 0 to v (n,) in place (log v with extended = 1).
 *   lambdas (nlayers,); index (nlayers, heads) int64 into the tables; diag, sink, weights
 *   (nlayers, heads); past, future (ntables, n) logit tables (already / tau; future[., 0] unused);
 *   reach L (window w: L = w - 1; none: n - 1); bidir K (0 or 1: none; K > 1 needs L = n - 1);
 *   min_self, last_self, deficit (nlayers,). Returns 0 or an error code. */
static int solve(int64_t n, int64_t heads, int64_t nlayers, int64_t ntables, const double *lambdas,
                 const int64_t *index, const double *diag, const double *sink, const double *weights,
                 const double *past, const double *future, int64_t reach, int64_t bidir, int64_t nthreads,
                 double *v, double *min_self, double *last_self, double *deficit, int extended) {
  if (n < 1 || heads < 1 || nlayers < 0 || ntables < 1 || reach < 0 || reach > n - 1 || bidir < 0 ||
      bidir > n || (bidir > 1 && reach != n - 1) || nthreads < 1)
    return ERR_ARGS;
  for (int64_t k = 0; k < nlayers * heads; ++k)
    if (index[k] < 0 || index[k] >= ntables) return ERR_ARGS;
  if (nthreads > heads) nthreads = heads;
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  problem_t pb = {n, heads, nlayers, ntables, reach, bidir, nthreads, lambdas, diag, sink, weights, past,
                  future, index, v, min_self, last_self, deficit};
  pb.error = 0;
  pb.extended = extended;
  thread_t ths[MAX_THREADS];
  memset(ths, 0, sizeof ths);
  pb.threads = ths;
  int rc = OK;
  for (int64_t k = 0; k < nthreads; ++k) {
    thread_t *th = &ths[k];
    th->pb = &pb;
    th->id = k;
    th->h0 = k * heads / nthreads;
    th->h1 = (k + 1) * heads / nthreads;
    double *buf = calloc((size_t)(10 * n), sizeof(double));
    if (!buf) { rc = ERR_MEMORY; break; }
    th->lp = buf; th->e = buf + n; th->ef = buf + 2 * n; th->es = buf + 3 * n;
    th->z = buf + 4 * n; th->u = buf + 5 * n; th->out = buf + 6 * n; th->self = buf + 7 * n;
    th->fcum = buf + 8 * n; th->fpre = buf + 9 * n;
  }
  if (rc == OK) {
    pthread_barrier_init(&pb.barrier, NULL, (unsigned)nthreads);
    pthread_mutex_init(&pb.gate_lock, NULL);
    pthread_cond_init(&pb.gate, NULL);
    pb.go = 0;
    pthread_t tids[MAX_THREADS];
    int64_t started = 1;
    for (; started < nthreads; ++started)
      if (pthread_create(&tids[started], NULL, worker, &ths[started]) != 0) break;
    pthread_mutex_lock(&pb.gate_lock);
    pb.go = started == nthreads ? 1 : -1;
    pthread_cond_broadcast(&pb.gate);
    pthread_mutex_unlock(&pb.gate_lock);
    if (pb.go > 0) worker(&ths[0]);
    for (int64_t k = 1; k < started; ++k) pthread_join(tids[k], NULL);
    rc = pb.go > 0 ? pb.error : ERR_THREAD;
    pthread_cond_destroy(&pb.gate);
    pthread_mutex_destroy(&pb.gate_lock);
    pthread_barrier_destroy(&pb.barrier);
  }
  for (int64_t k = 0; k < nthreads; ++k) free(ths[k].lp);
  return rc;
}

int posbias_bias_profile(int64_t n, int64_t heads, int64_t nlayers, int64_t ntables, const double *lambdas,
                         const int64_t *index, const double *diag, const double *sink, const double *weights,
                         const double *past, const double *future, int64_t reach, int64_t bidir,
                         int64_t nthreads, double *v, double *min_self, double *last_self, double *deficit) {
  return solve(n, heads, nlayers, ntables, lambdas, index, diag, sink, weights, past, future, reach, bidir,
               nthreads, v, min_self, last_self, deficit, 0);
}

/* As posbias_bias_profile with v holding log v (-inf for 0) in extended range; deficit is 0. */
int posbias_bias_profile_log(int64_t n, int64_t heads, int64_t nlayers, int64_t ntables, const double *lambdas,
                             const int64_t *index, const double *diag, const double *sink, const double *weights,
                             const double *past, const double *future, int64_t reach, int64_t bidir,
                             int64_t nthreads, double *logv, double *min_self, double *last_self, double *deficit) {
  return solve(n, heads, nlayers, ntables, lambdas, index, diag, sink, weights, past, future, reach, bidir,
               nthreads, logv, min_self, last_self, deficit, 1);
}

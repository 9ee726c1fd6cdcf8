/* One W panel of a block-scaled product (numerics/scaled_product.py), in one pass pair.
 *
 * For a row block I of Z = X Y (numerics/scaled_product.py, ``multiply``), with s[l] = c^X[I, l]
 * the block's column scales and log Y the entries' logarithms, the panel of columns j0 .. j0 + cols - 1
 * over rows l0 .. l0 + rows - 1 of Y is
 *
 *     g[j]    = max_l (log Y[l, j] + s[l])                          (-inf where every term is -inf)
 *     W[l, j] = exp((log Y[l, j] + s[l]) - g~[j])   if that exponent >= keep~[l], else 0,
 *
 * with g~[j] = g[j] where finite, else 0, and keep~[l] = max(keep[l], log 2^-1022). The additions are
 * rounded exactly as NumPy rounds the same expression (the sum, then the difference), so g and the
 * cut are bit for bit those of the NumPy route; the route differs from it only in the exponential.
 *
 * The cut. keep[l] = log(2^-1022 / m_l) >= log 2^-1022 for every column l of X with a non-zero
 * mantissa (m_l <= 1 is its smallest one), so there keep~ = keep; for a column of X that is all zero
 * (keep = -inf) the NumPy route keeps exp(t) down to the subnormals and this one cuts below 2^-1022:
 * those W rows multiply zero mantissas only, so the products are the same.
 *
 * The exponential, for 2^-1022 <= e^t <= 1 only (t in [log 2^-1022, 0]; the cut guarantees it):
 * t = k ln 2 + r with k = round(t / ln 2) (the 1.5 * 2^52 shift), |r| <= ln 2 / 2 (ln 2 split in a
 * 32-bit head and a tail, Cody and Waite), e^r by its Taylor polynomial of degree 13 in Horner form
 * (exp_taylor.h, shared with bias_layer.c; truncation below r^14 / 14! < 5e-18, 0.03 ulp), and 2^k
 * built in the exponent field (k >= -1022: a normal number, so the scaling is exact). Measured
 * against glibc's exp on 10^8 arguments drawn over the range: at most 1 ulp apart
 * (tests/numerics/test_scaled_panel.py checks 2 ulps on 2 10^5).
 *
 * Vectorisation: the loops have no branches and no calls, so GCC vectorises them; on x86-64 with
 * GCC the function is compiled for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and the baseline, and
 * the loader picks the widest the processor has (target_clones). The FMA contraction of the Horner
 * steps changes the polynomial's rounding, not its accuracy bound. Float64; no allocation; the caller
 * releases the GIL (ctypes), so threads may form panels at once.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exp_taylor.h"

#define LN2_HI 6.93147180369123816490e-01 /* ln 2 with its last 32 bits zero: k * LN2_HI is exact */
#define LN2_LO 1.90821492927058770002e-10 /* ln 2 - LN2_HI */
#define INV_LN2 1.44269504088896338700e+00
#define SHIFT 6755399441055744.0          /* 1.5 * 2^52: x + SHIFT rounds x to an integer in the low bits */
#define LOG_TINY (-708.39641853226410622) /* log 2^-1022 */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VECTOR_CLONES
#endif

static inline double exp_normal(double t) {
  double kd = t * INV_LN2 + SHIFT;
  int64_t kbits, sbits;
  const double shift = SHIFT;
  memcpy(&kbits, &kd, sizeof kd);
  memcpy(&sbits, &shift, sizeof shift);
  kd -= SHIFT;
  const double r = (t - kd * LN2_HI) - kd * LN2_LO;
  const double p = POSBIAS_EXP_TAYLOR13(r);
  const int64_t ebits = (kbits - sbits + 1023) << 52; /* 2^k, k = kbits - sbits in [-1022, 0] */
  double scale;
  memcpy(&scale, &ebits, sizeof ebits);
  return p * scale;
}

/* The panel above: logy points at log Y[l0, j0] (row stride ldy), s and keep at s[l0] and keep[l0],
 * w at the panel's first entry (row stride ldw); g (cols) receives the column maxima and shift
 * (cols) the shifts g~ used. Returns 0, or 4 for invalid sizes. */
VECTOR_CLONES
int posbias_w_panel(int64_t rows, int64_t cols, const double *logy, int64_t ldy, const double *s,
                    const double *keep, double *w, int64_t ldw, double *g, double *shift) {
  if (rows < 0 || cols < 0 || ldy < cols || ldw < cols) return 4;
  for (int64_t j = 0; j < cols; j++) g[j] = -INFINITY;
  for (int64_t l = 0; l < rows; l++) {
    const double *row = logy + l * ldy;
    const double sl = s[l];
    for (int64_t j = 0; j < cols; j++) {
      const double u = row[j] + sl;
      g[j] = u > g[j] ? u : g[j];
    }
  }
  for (int64_t j = 0; j < cols; j++) shift[j] = isfinite(g[j]) ? g[j] : 0.0;
  for (int64_t l = 0; l < rows; l++) {
    const double *row = logy + l * ldy;
    const double sl = s[l];
    const double kl = keep[l] > LOG_TINY ? keep[l] : LOG_TINY;
    double *wr = w + l * ldw;
    for (int64_t j = 0; j < cols; j++) {
      const double t = (row[j] + sl) - shift[j];
      const int cut = t < kl; /* -inf is cut; a NaN (none can arise) would stay NaN */
      const double e = exp_normal(cut ? 0.0 : t);
      wr[j] = cut ? 0.0 : e;
    }
  }
  return 0;
}

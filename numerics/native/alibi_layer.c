/* One ALiBi + content layer v -> v R^(t) on the CPU, for every head in one pass.
 *
 * The same mathematics as numerics/structured.py (linear arithmetic), written as
 * tight loops so that small problems are not dominated by per-kernel overhead:
 *
 *   alpha_{h,i} = 1 / (1 + q_h S_{h,i}),   u_{h,i} = w_h q_h alpha_{h,i} v_i
 *   back_j  = sum_{i>j, i-j<W} u_i r^{i-j}:  back_j = r (u_{j+1} + back_{j+1}) - [W] r^W u_{j+W}
 *   fwd_j   = sum_{i<j} u_i r^{j-i} (j < K):  fwd_j = r (u_{j-1} + fwd_{j-1})
 *   v'_j    = (1 - lambda) v_j + lambda (alpha-bar_j v_j + sum_h (back_j + fwd_j))
 *
 * Arguments (XLA FFI buffers, float64 unless noted):
 *   v (P), s (H, P) row normalisers S, r (H), q (H), w (H), rw (H) = r^(W-1),
 *   lam (1), shape (3, int64) = {window W (0: none), bidirectional length K, unused}.
 * Results: v' (P), alpha-bar (P), scratch (8, P).
 * Built by numerics/native.py with gcc against jaxlib's xla/ffi/api/c_api.h.
 */
#include <stdint.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

static XLA_FFI_Error *metadata(XLA_FFI_CallFrame *frame) {
  XLA_FFI_Extension_Base *ext = frame->extension_start;
  while (ext != NULL) {
    if (ext->type == XLA_FFI_Extension_Metadata) {
      XLA_FFI_Metadata_Extension *meta = (XLA_FFI_Metadata_Extension *)ext;
      meta->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
      meta->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
      meta->metadata->traits = 0;
      return NULL;
    }
    ext = ext->next;
  }
  return NULL;
}

static const double *arg(XLA_FFI_CallFrame *frame, int k) {
  return (const double *)((XLA_FFI_Buffer *)frame->args.args[k])->data;
}

static double *ret(XLA_FFI_CallFrame *frame, int k) {
  return (double *)((XLA_FFI_Buffer *)frame->rets.rets[k])->data;
}

/* Heads are processed HB at a time: the tails are first-order recurrences along the
 * tokens, so one head alone is bound by the latency of its dependency chain; HB
 * independent chains per step keep the CPU busy. */
#define HB 8

XLA_FFI_Error *posbias_alibi_layer(XLA_FFI_CallFrame *frame) {
  if (frame->extension_start != NULL && frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    return metadata(frame);
  }
  XLA_FFI_Buffer *sbuf = (XLA_FFI_Buffer *)frame->args.args[1];
  const int64_t heads = sbuf->dims[0], p = sbuf->dims[1];
  const double *v = arg(frame, 0), *s = arg(frame, 1), *r = arg(frame, 2), *q = arg(frame, 3);
  const double *w = arg(frame, 4), *rw = arg(frame, 5), lam = arg(frame, 6)[0];
  const int64_t *shape = (const int64_t *)((XLA_FFI_Buffer *)frame->args.args[7])->data;
  const int64_t window = shape[0], bidir = shape[1];
  double *out = ret(frame, 0), *alpha_bar = ret(frame, 1), *ru = ret(frame, 2); /* ru: (HB, P) scratch */

  memset(out, 0, (size_t)p * sizeof(double));
  memset(alpha_bar, 0, (size_t)p * sizeof(double));
  for (int64_t h0 = 0; h0 < heads; h0 += HB) {
    const int64_t nb = heads - h0 < HB ? heads - h0 : HB;
    double rr[HB] = {0}, rwin[HB] = {0};
    for (int64_t k = 0; k < nb; ++k) { /* ru_k[i] = r w q alpha_i v_i: the recurrences' input */
      const int64_t h = h0 + k;
      const double *sh = s + h * p;
      const double qh = q[h], wh = w[h], rwq = r[h] * w[h] * q[h];
      double *ruk = ru + k * p;
      rr[k] = r[h];
      rwin[k] = rw[h];
      for (int64_t i = 0; i < p; ++i) {
        const double a = 1.0 / (1.0 + qh * sh[i]);
        alpha_bar[i] += wh * a;
        ruk[i] = rwq * a * v[i];
      }
    }
    double t[HB] = {0};
    for (int64_t j = p - 2; j >= 0; --j) { /* back_j = r back_{j+1} + ru_{j+1} - [W] r^(W-1) ru_{j+W} */
      double acc = 0.0;
      for (int64_t k = 0; k < nb; ++k) {
        t[k] = rr[k] * t[k] + ru[k * p + j + 1];
        if (window > 0 && j + window < p) t[k] -= rwin[k] * ru[k * p + j + window];
        acc += t[k];
      }
      out[j] += acc;
    }
    for (int64_t k = 0; k < nb; ++k) t[k] = 0.0;
    for (int64_t j = 1; j < bidir && j < p; ++j) { /* fwd_j = r fwd_{j-1} + ru_{j-1}, j < K */
      double acc = 0.0;
      for (int64_t k = 0; k < nb; ++k) {
        t[k] = rr[k] * t[k] + ru[k * p + j - 1];
        acc += t[k];
      }
      out[j] += acc;
    }
  }
  for (int64_t j = 0; j < p; ++j) {
    out[j] = (1.0 - lam) * v[j] + lam * (alpha_bar[j] * v[j] + out[j]);
  }
  return NULL;
}

/* e^r for |r| <= ln 2 / 2, the core of the kernels' exponentials (bias_layer.c's exp4, scaled_panel.c's
 * exp_normal): the Taylor polynomial of degree 13 in Horner form, truncated below r^14 / 14! < 5e-18
 * relative (0.03 ulp), each step q = q r + 1/k!. R may be a double or a GCC vector of doubles; the
 * caller splits x = n ln 2 + r and scales by 2^n. Compiled into each kernel (numerics/native.py hashes
 * this folder's headers into every kernel's cache key). */
#ifndef POSBIAS_EXP_TAYLOR_H
#define POSBIAS_EXP_TAYLOR_H

#define POSBIAS_EXP_TAYLOR13(R)                                                                            \
  ((((((((((((((R) * (1.0 / 6227020800.0) + 1.0 / 479001600.0) * (R) + 1.0 / 39916800.0) * (R) +           \
           1.0 / 3628800.0) * (R) + 1.0 / 362880.0) * (R) + 1.0 / 40320.0) * (R) + 1.0 / 5040.0) * (R) +     \
        1.0 / 720.0) * (R) + 1.0 / 120.0) * (R) + 1.0 / 24.0) * (R) + 1.0 / 6.0) * (R) + 0.5) * (R) + 1.0) * \
       (R) + 1.0)

#endif

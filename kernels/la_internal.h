/*
 * Private to kernels/: what linear_attn.c dispatches to in the other
 * linear-attention files.
 */
#ifndef HY_LA_INTERNAL_H
#define HY_LA_INTERNAL_H

#include "hy_kernels.h"

/* The delta rule's shared pieces (gdn.c): one recurrent token on a state of
 * width w with per-row decays a [dk], and the unit-lower-triangular inverse
 * (I + Lm)^-1 of the chunked WY form. */
void hy_delta_step(float *X, int dk, int w, const float *a, float b, const float *k, const float *v,
                   const float *q, float *out, float *u);
void hy_unit_lower_inverse(int L, const float *A, float *Tm, int ld);

/* Kimi Delta Attention (kda.c), the contracts of hy_la_recurrent and
 * hy_la_chunked for in->family == HY_LA_KDA. */
void hy_la_kda_recurrent(const hy_la_in *in, float *S, float *o, size_t ldo, float *T);
size_t hy_la_kda_scratch(int dk, int dv);
void hy_la_kda_chunked(const hy_la_in *in, float *S, float *o, size_t ldo, float *T, float *work);

#endif

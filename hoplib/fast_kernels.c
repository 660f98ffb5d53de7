/* hoplib.fast: fused CPU kernels for training hoplib.models.GPT (see hoplib/fast.py for the Python side,
   the maths and the build: compiled once with the system's C compiler, -O3 -march=native -ffast-math). */
#include <stdint.h>
#include <math.h>

/* Counter-based random bits: two rounds of the "lowbias32" integer hash, keyed by a 64-bit seed. */
static inline uint32_t hb_mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x;
}
static inline uint32_t hb_bits(uint32_t s0, uint32_t s1, uint32_t i) { return hb_mix(hb_mix(i ^ s0) + s1); }

/* exp for x in [-87, 88]: 2^n * p(r), n = round(x / ln2), r = x - n ln2, |r| <= ln2/2; degree-6 polynomial,
   ~1 ulp.  Written so that the compiler vectorises it: clamps as comparisons (fminf/fmaxf would be library calls
   under IEEE semantics), rounding by truncating a positive number. */
static inline float hb_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    int32_t ni = (int32_t)(x * 1.44269504088896341f + 128.5f);  /* n + 128, > 0 */
    float n = (float)(ni - 128);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = (ni - 1) << 23;  /* (n + 127) << 23 = 2^n */
    float s; __builtin_memcpy(&s, &e, 4);
    return p * s;
}

/* row[j] = exp(scale * row[j] - mx) for j < n; returns their sum.  A function of its own (not inlined): inside
   the softmax loop nest GCC does not vectorise it. */
__attribute__((noinline)) static float hb_exp_row(float *restrict row, int64_t n, float scale, float mx) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) { float e = hb_exp(row[j] * scale - mx); row[j] = e; sum += e; }
    return sum;
}

/* y[r, j] = res[r, j] + keep * (x[r, j] + bias[j]) * scale for rows r < rows, j < n (res may be NULL);
   the random counter is the flat index r * n + j. */
void hb_dropout_fwd(const float *x, const float *bias, const float *res, float *y, int64_t rows, int64_t n,
                    uint64_t seed, uint32_t thresh, float scale) {
    uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)(seed >> 32);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        uint32_t base = (uint32_t)(r * n);
        if (res) {
            const float *rr = res + r * n;
            for (int64_t j = 0; j < n; j++) {
                uint32_t h = hb_bits(s0, s1, base + (uint32_t)j);
                yr[j] = rr[j] + (h >= thresh ? (xr[j] + bias[j]) * scale : 0.0f);
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                uint32_t h = hb_bits(s0, s1, base + (uint32_t)j);
                yr[j] = h >= thresh ? (xr[j] + bias[j]) * scale : 0.0f;
            }
        }
    }
}

/* gx = keep * g * scale; if gb is not NULL it receives the column sums of gx (the bias gradient). */
void hb_dropout_bwd(const float *g, float *gx, float *gb, int64_t rows, int64_t n, uint64_t seed, uint32_t thresh,
                    float scale) {
    uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)(seed >> 32);
    if (gb) for (int64_t j = 0; j < n; j++) gb[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = g + r * n;
        float *xr = gx + r * n;
        uint32_t base = (uint32_t)(r * n);
        for (int64_t j = 0; j < n; j++) {
            uint32_t h = hb_bits(s0, s1, base + (uint32_t)j);
            xr[j] = h >= thresh ? gr[j] * scale : 0.0f;
        }
        if (gb) for (int64_t j = 0; j < n; j++) gb[j] += xr[j];
    }
}

/* GELU (tanh approximation) of z = x[r, j] + bias[j]: 0.5 z (1 + tanh(u)), u = c (z + 0.044715 z^3), computed as
   z * sigmoid(2u) with sigmoid(2u) = 1 / (1 + exp(-2u)) (accurate in both tails);
   d/dz = s + 2 z s (1 - s) du/dz. */
#define HB_C 0.7978845608028654f
/* e = exp(-2u) for z (u clamped to +-40, where the sigmoid is 0 or 1 to float precision). */
static inline float hb_gelu_e(float v) {
    float u = HB_C * (v + 0.044715f * v * v * v);
    u = u < -40.0f ? -40.0f : (u > 40.0f ? 40.0f : u);
    return hb_exp(-2.0f * u);
}
void hb_gelu_fwd(const float *x, const float *bias, float *y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        for (int64_t j = 0; j < n; j++) {
            float v = xr[j] + bias[j];
            yr[j] = v / (1.0f + hb_gelu_e(v));
        }
    }
}
/* The backward pass recomputes s = sigmoid(2u) (cheaper than storing it: the pass is bound by memory traffic),
   and 1 - s as e s, accurate where s is close to 1. */
void hb_gelu_bwd(const float *g, const float *x, const float *bias, float *gx, float *gb, int64_t rows, int64_t n) {
    if (gb) for (int64_t j = 0; j < n; j++) gb[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *gr = g + r * n;
        float *or = gx + r * n;
        for (int64_t j = 0; j < n; j++) {
            float v = xr[j] + bias[j];
            float e = hb_gelu_e(v);
            float s = 1.0f / (1.0f + e);
            float du = HB_C * (1.0f + 3.0f * 0.044715f * v * v);
            or[j] = gr[j] * (s + 2.0f * v * s * (e * s) * du);
        }
        if (gb) for (int64_t j = 0; j < n; j++) gb[j] += or[j];
    }
}

/* (B, T, 3, H, D) fused projection + bias (3, H, D) -> (3, B, H, T, D) head-major q, k, v. */
void hb_split_heads(const float *qkv, const float *bias, float *out, int64_t nb, int64_t t, int64_t nh, int64_t d) {
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < t; i++)
            for (int64_t w = 0; w < 3; w++)
                for (int64_t h = 0; h < nh; h++) {
                    const float *src = qkv + (((b * t + i) * 3 + w) * nh + h) * d;
                    const float *bb = bias + (w * nh + h) * d;
                    float *dst = out + (((w * nb + b) * nh + h) * t + i) * d;
                    for (int64_t k = 0; k < d; k++) dst[k] = src[k] + bb[k];
                }
}

/* One row i of the causal softmax of scale * row over j <= i, then dropout: row is overwritten with P, prow
   receives keep * P * keep_scale, entries i < j < w are set to 0 in both.  base: the row's random counter. */
static inline void hb_softmax_row_fwd(float *row, float *prow, int64_t i, int64_t w, float scale, uint32_t s0,
                                      uint32_t s1, uint32_t base, uint32_t thresh, float keep_scale) {
    float mx = row[0];
    for (int64_t j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
    float inv = 1.0f / hb_exp_row(row, i + 1, scale, mx * scale);  /* scale > 0 */
    for (int64_t j = 0; j <= i; j++) {
        float p = row[j] * inv;
        row[j] = p;
        uint32_t h = hb_bits(s0, s1, base + (uint32_t)j);
        prow[j] = h >= thresh ? p * keep_scale : 0.0f;
    }
    for (int64_t j = i + 1; j < w; j++) { row[j] = 0.0f; prow[j] = 0.0f; }
}

/* Its backward: drow holds dL/dPd on entry and dL/d(raw scores) on exit (0 for i < j < w); prow is P. */
static inline void hb_softmax_row_bwd(const float *prow, float *drow, int64_t i, int64_t w, float scale,
                                      uint32_t s0, uint32_t s1, uint32_t base, uint32_t thresh, float keep_scale) {
    float dot = 0.0f;
    for (int64_t j = 0; j <= i; j++) {
        uint32_t h = hb_bits(s0, s1, base + (uint32_t)j);
        float dp = h >= thresh ? drow[j] * keep_scale : 0.0f;
        drow[j] = dp;
        dot += dp * prow[j];
    }
    for (int64_t j = 0; j <= i; j++) drow[j] = scale * prow[j] * (drow[j] - dot);
    for (int64_t j = i + 1; j < w; j++) drow[j] = 0.0f;
}

/* Causal softmax + dropout over (bh, t, t) scores s (overwritten with P; pd receives the dropped P).
   Random index = flat index in (bh, t, t). */
void hb_softmax_drop_fwd(float *s, float *pd, int64_t bh, int64_t t, float scale, uint64_t seed, uint32_t thresh,
                         float keep_scale) {
    for (int64_t r = 0; r < bh * t; r++)
        hb_softmax_row_fwd(s + r * t, pd + r * t, r % t, t, scale, (uint32_t)seed, (uint32_t)(seed >> 32),
                           (uint32_t)(r * t), thresh, keep_scale);
}

/* Backward: d (bh, t, t) holds dL/dPd on entry and dL/d(raw scores) on exit; p is the softmax P. */
void hb_softmax_drop_bwd(const float *p, float *d, int64_t bh, int64_t t, float scale, uint64_t seed,
                         uint32_t thresh, float keep_scale) {
    for (int64_t r = 0; r < bh * t; r++)
        hb_softmax_row_bwd(p + r * t, d + r * t, r % t, t, scale, (uint32_t)seed, (uint32_t)(seed >> 32),
                           (uint32_t)(r * t), thresh, keep_scale);
}

/* ---- Fused causal attention for head sizes d that are multiples of 8: small matrix products that skip the
   blocks above the diagonal (about half the work of full products), computed per (batch, head) so that the
   (t, tp) score matrix stays in cache, writing the (B, T, m) output and the (B, T, 3m) gradient directly (no
   head merge copies).  Score rows have stride tp >= t + 3, a multiple of 8; columns >= t are 0. */
typedef float hb_v8 __attribute__((vector_size(32)));
static inline hb_v8 hb_ld(const float *p) { hb_v8 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void hb_st(float *p, hb_v8 v) { __builtin_memcpy(p, &v, sizeof v); }

/* Register tiles: 4 rows x NV vectors of 8 (NV = 2, then 1 for a remainder of 8), so that 8 independent FMA
   chains hide the FMA latency.  Rows beyond the matrix (nr < 4) repeat row 0 and are not stored. */
#define HB_TILE_STORE(dst, stride, nr, NV)                                                        \
    for (int r = 0; r < 4; r++)                                                                   \
        if (r < nr) for (int u = 0; u < NV; u++) hb_st((dst) + r * (stride) + 8 * u, a[r][u]);

/* c[i, j] = sum_k x[i, k] yt[k, j] for i < t and j < 8 ceil((i + 1) / 8) (the entries j > i are left for the
   caller to overwrite); x rows stride xs, yt (d, tp), c rows stride tp. */
static inline __attribute__((always_inline)) void hb_xyt_tile(const float *const *xr, const float *yt, float *c,
                                                              int64_t nr, int64_t tp, int64_t d, const int NV) {
    hb_v8 a[4][2] = {{{0}}};
    for (int64_t k = 0; k < d; k++) {
        hb_v8 y[2];
        for (int u = 0; u < NV; u++) y[u] = hb_ld(yt + k * tp + 8 * u);
        for (int r = 0; r < 4; r++)
            for (int u = 0; u < NV; u++) a[r][u] += xr[r][k] * y[u];
    }
    HB_TILE_STORE(c, tp, nr, NV)
}
static void hb_xyt_causal(const float *x, int64_t xs, const float *yt, float *c, int64_t t, int64_t tp, int64_t d) {
    for (int64_t i0 = 0; i0 < t; i0 += 4) {
        int64_t nr = t - i0 < 4 ? t - i0 : 4;
        const float *xr[4];
        for (int r = 0; r < 4; r++) xr[r] = x + (i0 + (r < nr ? r : 0)) * xs;
        int64_t jend = ((i0 + nr - 1) / 8 + 1) * 8, j0 = 0;
        for (; j0 + 16 <= jend; j0 += 16) hb_xyt_tile(xr, yt + j0, c + i0 * tp + j0, nr, tp, d, 2);
        if (j0 < jend) hb_xyt_tile(xr, yt + j0, c + i0 * tp + j0, nr, tp, d, 1);
    }
}

/* o[i, :] = sum_{j <= i} m[i, j] y[j, :] (m zero above the diagonal); m rows stride ms, y rows ys, o rows os. */
static inline __attribute__((always_inline)) void hb_my_tile(const float *const *mr, const float *y, int64_t ys,
                                                             float *o, int64_t os, int64_t nr, int64_t jend,
                                                             const int NV) {
    hb_v8 a[4][2] = {{{0}}};
    for (int64_t j = 0; j < jend; j++) {
        hb_v8 v[2];
        for (int u = 0; u < NV; u++) v[u] = hb_ld(y + j * ys + 8 * u);
        for (int r = 0; r < 4; r++)
            for (int u = 0; u < NV; u++) a[r][u] += mr[r][j] * v[u];
    }
    HB_TILE_STORE(o, os, nr, NV)
}
static void hb_my_causal(const float *m, int64_t ms, const float *y, int64_t ys, float *o, int64_t os, int64_t t,
                         int64_t d) {
    for (int64_t i0 = 0; i0 < t; i0 += 4) {
        int64_t nr = t - i0 < 4 ? t - i0 : 4;
        const float *mr[4];
        for (int r = 0; r < 4; r++) mr[r] = m + (i0 + (r < nr ? r : 0)) * ms;
        int64_t c0 = 0;
        for (; c0 + 16 <= d; c0 += 16) hb_my_tile(mr, y + c0, ys, o + i0 * os + c0, os, nr, i0 + nr, 2);
        if (c0 < d) hb_my_tile(mr, y + c0, ys, o + i0 * os + c0, os, nr, i0 + nr, 1);
    }
}

/* o[j, :] = sum_{i >= j} m[i, j] y[i, :] (m zero above the diagonal; reads m[i, j..j+3], inside the padded row). */
static inline __attribute__((always_inline)) void hb_mty_tile(const float *m, int64_t ms, const float *y, int64_t ys,
                                                              float *o, int64_t os, int64_t j0, int64_t nr,
                                                              int64_t t, const int NV) {
    hb_v8 a[4][2] = {{{0}}};
    for (int64_t i = j0; i < t; i++) {
        const float *mi = m + i * ms + j0;
        hb_v8 v[2];
        for (int u = 0; u < NV; u++) v[u] = hb_ld(y + i * ys + 8 * u);
        for (int r = 0; r < 4; r++)
            for (int u = 0; u < NV; u++) a[r][u] += mi[r] * v[u];
    }
    HB_TILE_STORE(o + j0 * os, os, nr, NV)
}
static void hb_mty_causal(const float *m, int64_t ms, const float *y, int64_t ys, float *o, int64_t os, int64_t t,
                          int64_t d) {
    for (int64_t j0 = 0; j0 < t; j0 += 4) {
        int64_t nr = t - j0 < 4 ? t - j0 : 4, c0 = 0;
        for (; c0 + 16 <= d; c0 += 16) hb_mty_tile(m, ms, y + c0, ys, o + c0, os, j0, nr, t, 2);
        if (c0 < d) hb_mty_tile(m, ms, y + c0, ys, o + c0, os, j0, nr, t, 1);
    }
}

/* Forward, after hb_split_heads: q, k, v (B H, T, d) -> vt (B H, d, tp) (saved for the backward pass), P and
   dropped P (B H, T, tp), out (B, T, m).  kt: scratch (d, tp). */
void hb_attn_fwd(const float *q, const float *k, const float *v, float *vt, float *kt, float *p, float *pd,
                 float *out, int64_t nb, int64_t t, int64_t tp, int64_t nh, int64_t d, float scale, uint64_t seed,
                 uint32_t thresh, float keep_scale) {
    int64_t m = nh * d;
    uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)(seed >> 32);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < nh; h++) {
            int64_t bh = b * nh + h;
            const float *qh = q + bh * t * d, *kh = k + bh * t * d, *vh = v + bh * t * d;
            float *vth = vt + bh * d * tp;
            for (int64_t c = 0; c < d; c++) {
                for (int64_t i = 0; i < t; i++) { kt[c * tp + i] = kh[i * d + c]; vth[c * tp + i] = vh[i * d + c]; }
                for (int64_t i = t; i < tp; i++) { kt[c * tp + i] = 0.0f; vth[c * tp + i] = 0.0f; }
            }
            float *ph = p + bh * t * tp, *pdh = pd + bh * t * tp;
            hb_xyt_causal(qh, d, kt, ph, t, tp, d);
            for (int64_t i = 0; i < t; i++)
                hb_softmax_row_fwd(ph + i * tp, pdh + i * tp, i, tp, scale, s0, s1, (uint32_t)((bh * t + i) * t),
                                   thresh, keep_scale);
            hb_my_causal(pdh, tp, vh, d, out + b * t * m + h * d, m, t, d);
        }
}

/* Backward.  gy (B, T, m) -> gqkv (B, T, 3m) (without the bias gradient); ds: scratch (t, tp). */
void hb_attn_bwd(const float *gy, const float *q, const float *k, const float *vt, const float *p, const float *pd,
                 float *ds, float *gqkv, int64_t nb, int64_t t, int64_t tp, int64_t nh, int64_t d, float scale,
                 uint64_t seed, uint32_t thresh, float keep_scale) {
    int64_t m = nh * d;
    uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)(seed >> 32);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < nh; h++) {
            int64_t bh = b * nh + h;
            const float *qh = q + bh * t * d, *kh = k + bh * t * d, *vth = vt + bh * d * tp;
            const float *ph = p + bh * t * tp, *pdh = pd + bh * t * tp, *gyh = gy + b * t * m + h * d;
            float *gq = gqkv + b * t * 3 * m + h * d;
            hb_xyt_causal(gyh, m, vth, ds, t, tp, d);                 /* dL/dPd = dO V^T */
            for (int64_t i = 0; i < t; i++)
                hb_softmax_row_bwd(ph + i * tp, ds + i * tp, i, tp, scale, s0, s1, (uint32_t)((bh * t + i) * t),
                                   thresh, keep_scale);
            hb_mty_causal(pdh, tp, gyh, m, gq + 2 * m, 3 * m, t, d);  /* dV = Pd^T dO */
            hb_my_causal(ds, tp, kh, d, gq, 3 * m, t, d);             /* dQ = dS K */
            hb_mty_causal(ds, tp, qh, d, gq + m, 3 * m, t, d);        /* dK = dS^T Q */
        }
}

/* fedrepro.learning.native_cnn's kernel: one SGD step (or the gradient) of a ConvNet's mean cross-entropy for each
 * of K clients on its own minibatch, the whole network of one client in its cache (convolutions without im2col,
 * 2x2-style max-pool with the first maximal element, ReLU, fully connected layers). Layout of one client's
 * activations: batch-last, (C, H, W, B), so that a row of a convolution's output is Wo * B contiguous lanes.
 * Plain C with GCC's vector extensions (VW floats a vector). */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* lanes of a vector: a register's width where the compiler targets AVX-512, else 8 (AVX2's; older CPUs split them) */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
/* register blocks: output channels x kernel columns of a weight gradient, output channels of a data gradient (32
 * vector registers with AVX-512, 16 without) */
#ifdef __AVX512F__
#define WG_OB 6
#define WG_SB 3
#define DG_OB 16
#else
#define WG_OB 4
#define WG_SB 2
#define DG_OB 12
#endif

static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vsplat(float s) { return (vf){0} + s; }
typedef float vf8 __attribute__((vector_size(8 * sizeof(float))));
typedef float vf4 __attribute__((vector_size(4 * sizeof(float))));
/* the sum of the lanes as a tree of halves (lane by lane in order would be VW dependent additions) */
static inline float hsum(vf v) {
#if VW == 16
    const vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
                  + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    const vf8 a = v;
#endif
    const vf4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* conv geometry, per layer: C H W O k Ho Wo Hp Wp */
enum { GC, GH, GW, GO, GK, GHO, GWO, GHP, GWP, NG };

/* ---------------------------------------------------------------- forward of one convolution, rows of lanes */
#define ALWAYS static inline __attribute__((always_inline))

/* CALL(k) with k the constant equal to n (1 to 8): a block's loops over its k rows unroll and its accumulators stay in
 * registers */
#define WITH_CONSTANT_UP_TO_8(n, CALL) \
    switch (n) {                       \
        case 8: CALL(8); break;        \
        case 7: CALL(7); break;        \
        case 6: CALL(6); break;        \
        case 5: CALL(5); break;        \
        case 4: CALL(4); break;        \
        case 3: CALL(3); break;        \
        case 2: CALL(2); break;        \
        default: CALL(1); break;       \
    }

ALWAYS void conv_fwd_block(const float *in, const int *g, int B, const float *w, const float *bias, float *z, int o0,
                           const int nb) {
    const int C = g[GC], H = g[GH], W = g[GW], k = g[GK], Ho = g[GHO], L = g[GWO] * B, ckk = C * k * k;
    (void)H;
    for (int i = 0; i < Ho; i++) {
        int v = 0;
        for (; v + VW <= L; v += VW) {
            vf acc[8];
            for (int o = 0; o < nb; o++) acc[o] = vsplat(bias[o0 + o]);
            for (int c = 0; c < C; c++)
                for (int r = 0; r < k; r++)
                    for (int s = 0; s < k; s++) {
                        vf xv = vload(in + ((c * H + i + r) * W + s) * B + v);
                        const float *wp = w + (o0 * C + c) * k * k + r * k + s;
                        for (int o = 0; o < nb; o++) acc[o] += wp[o * ckk] * xv;
                    }
            for (int o = 0; o < nb; o++) vstore(z + ((o0 + o) * Ho + i) * L + v, acc[o]);
        }
        for (; v < L; v++) {
            float acc[8];
            for (int o = 0; o < nb; o++) acc[o] = bias[o0 + o];
            for (int c = 0; c < C; c++)
                for (int r = 0; r < k; r++)
                    for (int s = 0; s < k; s++) {
                        float xs = in[((c * H + i + r) * W + s) * B + v];
                        const float *wp = w + (o0 * C + c) * k * k + r * k + s;
                        for (int o = 0; o < nb; o++) acc[o] += wp[o * ckk] * xs;
                    }
            for (int o = 0; o < nb; o++) z[((o0 + o) * Ho + i) * L + v] = acc[o];
        }
    }
}

static void conv_fwd(const float *in, const int *g, int B, const float *w, const float *bias, float *z) {
    for (int o0 = 0; o0 < g[GO]; o0 += 8) {
#define FWD(NB) conv_fwd_block(in, g, B, w, bias, z, o0, NB)
        WITH_CONSTANT_UP_TO_8(g[GO] - o0 < 8 ? g[GO] - o0 : 8, FWD)
#undef FWD
    }
}

typedef int vi __attribute__((vector_size(VW * sizeof(int))));
static inline vf vselect(vi take, vf a, vf b) { return (vf)(((vi)a & take) | ((vi)b & ~take)); }

/* one window row of lanes: m, ix <- the window's first maximal element and its position (a NaN wins), then ReLU */
static inline void pool_lanes(const float *z0, int Wo, int B, int p, float *hp, float *ix) {
    vf m = vload(z0), id = vsplat(0.f);
    for (int di = 0; di < p; di++)
        for (int dj = di ? 0 : 1; dj < p; dj++) {
            const vf v = vload(z0 + (di * Wo + dj) * B);
            const vi take = (v > m) | (v != v);
            m = vselect(take, v, m);
            id = vselect(take, vsplat((float)(di * p + dj)), id);
        }
    vstore(hp, vselect((m > 0.f) | (m != m), m, vsplat(0.f)));
    vstore(ix, id);
}

/* max-pool (p x p, stride p) then ReLU; idx: the window's position of the first maximal element (a NaN wins), as
 * the float d = di p + dj. Lanes: VW images at a time, the last VW overlapping the previous (the update is
 * idempotent); fewer than VW images one by one. */
static void pool_relu(const float *z, const int *g, int B, int p, float *h, float *idx) {
    const int O = g[GO], Ho = g[GHO], Wo = g[GWO], Hp = g[GHP], Wp = g[GWP];
    for (int o = 0; o < O; o++)
        for (int ip = 0; ip < Hp; ip++)
            for (int jp = 0; jp < Wp; jp++) {
                const float *z0 = z + ((o * Ho + p * ip) * Wo + p * jp) * B;
                const int at = ((o * Hp + ip) * Wp + jp) * B;
                if (B >= VW) {
                    for (int b = 0; b + VW <= B; b += VW) pool_lanes(z0 + b, Wo, B, p, h + at + b, idx + at + b);
                    if (B % VW) pool_lanes(z0 + B - VW, Wo, B, p, h + at + B - VW, idx + at + B - VW);
                    continue;
                }
                for (int b = 0; b < B; b++) {
                    float m = z0[b], id = 0.f;
                    for (int d = 1; d < p * p; d++) {
                        const float v = z0[((d / p) * Wo + d % p) * B + b];
                        if (v > m || v != v) { m = v; id = (float)d; }
                    }
                    h[at + b] = (m > 0.f || m != m) ? m : 0.f;
                    idx[at + b] = id;
                }
            }
}

/* the pooling's adjoint: dz (O Ho Wo B) gets each window's gradient at its maximal element, zero elsewhere (rows
 * and columns no window covers included); lanes as in pool_relu */
static inline void unpool_lanes(const float *gp, const float *ix, int Wo, int B, int p, float *d0) {
    const vf gv = vload(gp), iv = vload(ix);
    for (int di = 0; di < p; di++)
        for (int dj = 0; dj < p; dj++)
            vstore(d0 + (di * Wo + dj) * B, vselect(iv == (float)(di * p + dj), gv, vsplat(0.f)));
}

static void unpool(const float *g, const float *idx, const int *cg, int B, int p, float *dz) {
    const int O = cg[GO], Ho = cg[GHO], Wo = cg[GWO], Hp = cg[GHP], Wp = cg[GWP];
    if (Ho != p * Hp || Wo != p * Wp) memset(dz, 0, sizeof(float) * O * Ho * Wo * B);
    for (int o = 0; o < O; o++)
        for (int ip = 0; ip < Hp; ip++)
            for (int jp = 0; jp < Wp; jp++) {
                const int at = ((o * Hp + ip) * Wp + jp) * B;
                float *d0 = dz + ((o * Ho + p * ip) * Wo + p * jp) * B;
                if (B >= VW) {
                    for (int b = 0; b + VW <= B; b += VW) unpool_lanes(g + at + b, idx + at + b, Wo, B, p, d0 + b);
                    if (B % VW) unpool_lanes(g + at + B - VW, idx + at + B - VW, Wo, B, p, d0 + B - VW);
                    continue;
                }
                for (int d = 0; d < p * p; d++) {
                    float *dd = d0 + ((d / p) * Wo + d % p) * B;
                    for (int b = 0; b < B; b++) dd[b] = idx[at + b] == (float)d ? g[at + b] : 0.f;
                }
            }
}

/* ---------------------------------------------------------------- backward of one convolution */
/* dW[o][c][r][s0 .. s0 + sb] for o in o0 .. o0 + nb: each dz row loaded once for sb kernel columns */
ALWAYS void conv_wgrad_block(const float *in, const int *g, int B, const float *dz, float *dw, int o0, const int nb,
                             int c, int r, int s0, const int sb) {
    const int C = g[GC], H = g[GH], W = g[GW], k = g[GK], Ho = g[GHO], L = g[GWO] * B;
    (void)H;
    vf acc[6][3];
    float tail[6][3];
    for (int o = 0; o < nb; o++)
        for (int s = 0; s < sb; s++) { acc[o][s] = vsplat(0.f); tail[o][s] = 0.f; }
    for (int i = 0; i < Ho; i++) {
        const float *xr = in + ((c * H + i + r) * W + s0) * B;
        const float *dr = dz + (o0 * Ho + i) * L;
        int v = 0;
        for (; v + VW <= L; v += VW) {
            vf d[6];
            for (int o = 0; o < nb; o++) {
                d[o] = vload(dr + o * Ho * L + v);
#if defined(__x86_64__) && (VW == 16 && defined(__AVX512F__) || VW == 8 && defined(__AVX__))
                __asm__("" : "+v"(d[o])); /* kept in a register for the sb columns, not loaded again for each */
#endif
            }
            for (int s = 0; s < sb; s++) {
                const vf xv = vload(xr + s * B + v);
                for (int o = 0; o < nb; o++) acc[o][s] += d[o] * xv;
            }
        }
        for (; v < L; v++)
            for (int s = 0; s < sb; s++)
                for (int o = 0; o < nb; o++) tail[o][s] += dr[o * Ho * L + v] * xr[s * B + v];
    }
    for (int o = 0; o < nb; o++)
        for (int s = 0; s < sb; s++) dw[(((o0 + o) * C + c) * k + r) * k + s0 + s] = hsum(acc[o][s]) + tail[o][s];
}

#define WGRAD_SB(NB)                                                                          \
    switch (sb) {                                                                             \
        case 3: conv_wgrad_block(in, g, B, dz, dw, o0, NB, c, r, s0, 3); break;              \
        case 2: conv_wgrad_block(in, g, B, dz, dw, o0, NB, c, r, s0, 2); break;              \
        default: conv_wgrad_block(in, g, B, dz, dw, o0, NB, c, r, s0, 1); break;             \
    }

static void conv_wgrad(const float *in, const int *g, int B, const float *dz, float *dw, float *db) {
    const int O = g[GO], C = g[GC], k = g[GK], n = g[GHO] * g[GWO] * B;
    for (int o0 = 0; o0 < O; o0 += WG_OB)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < k; r++)
                for (int s0 = 0; s0 < k; s0 += WG_SB) {
                    const int sb = k - s0 < WG_SB ? k - s0 : WG_SB;
                    switch (O - o0 < WG_OB ? O - o0 : WG_OB) {
                        case 6: WGRAD_SB(6) break;
                        case 5: WGRAD_SB(5) break;
                        case 4: WGRAD_SB(4) break;
                        case 3: WGRAD_SB(3) break;
                        case 2: WGRAD_SB(2) break;
                        default: WGRAD_SB(1) break;
                    }
                }
    for (int o = 0; o < O; o++) {
        vf acc = vsplat(0.f);
        float t = 0.f;
        const float *d = dz + o * n;
        int v = 0;
        for (; v + VW <= n; v += VW) acc += vload(d + v);
        for (; v < n; v++) t += d[v];
        db[o] = hsum(acc) + t;
    }
}

/* dh (C H W B) += the convolution's adjoint applied to dz, output channels o0 .. o0 + nb */
ALWAYS void conv_dgrad_block(const int *g, int B, const float *w, const float *dz, float *dh, int o0, const int nb) {
    const int C = g[GC], H = g[GH], W = g[GW], k = g[GK], Ho = g[GHO], L = g[GWO] * B, ckk = C * k * k;
    (void)H;
    for (int i = 0; i < Ho; i++) {
        int v = 0;
        for (; v + VW <= L; v += VW) {
            vf d[DG_OB];
            for (int o = 0; o < nb; o++) d[o] = vload(dz + ((o0 + o) * Ho + i) * L + v);
            for (int c = 0; c < C; c++)
                for (int r = 0; r < k; r++)
                    for (int s = 0; s < k; s++) {
                        const float *wp = w + (o0 * C + c) * k * k + r * k + s;
                        vf acc = wp[0] * d[0];
                        for (int o = 1; o < nb; o++) acc += wp[o * ckk] * d[o];
                        float *t = dh + ((c * H + i + r) * W + s) * B + v;
                        vstore(t, vload(t) + acc);
                    }
        }
        for (; v < L; v++)
            for (int c = 0; c < C; c++)
                for (int r = 0; r < k; r++)
                    for (int s = 0; s < k; s++) {
                        const float *wp = w + (o0 * C + c) * k * k + r * k + s;
                        float acc = 0.f;
                        for (int o = 0; o < nb; o++) acc += wp[o * ckk] * dz[((o0 + o) * Ho + i) * L + v];
                        dh[((c * H + i + r) * W + s) * B + v] += acc;
                    }
    }
}

static void conv_dgrad(const int *g, int B, const float *w, const float *dz, float *dh) {
    memset(dh, 0, sizeof(float) * g[GC] * g[GH] * g[GW] * B);
    for (int o0 = 0; o0 < g[GO]; o0 += DG_OB) {
        int nb = g[GO] - o0 < DG_OB ? g[GO] - o0 : DG_OB;
        if (nb == DG_OB) conv_dgrad_block(g, B, w, dz, dh, o0, DG_OB);
        else if (nb == 6) conv_dgrad_block(g, B, w, dz, dh, o0, 6);
        else conv_dgrad_block(g, B, w, dz, dh, o0, nb);
    }
}

/* ---------------------------------------------------------------- fully connected layers, (features, B) */
/* C[m][:] = sum_k A[m][k] Bm[k][:] (rows of C and Bm contiguous, lanes along them; blocks of 8 rows) */
ALWAYS void axpy_block(int N, int Kd, const float *A, const float *Bm, float *C, const int mb) {
    int n = 0;
    for (; n + VW <= N; n += VW) {
        vf acc[8];
        for (int i = 0; i < mb; i++) acc[i] = vsplat(0.f);
        for (int k = 0; k < Kd; k++) {
            const vf b = vload(Bm + k * N + n);
            for (int i = 0; i < mb; i++) acc[i] += A[i * Kd + k] * b;
        }
        for (int i = 0; i < mb; i++) vstore(C + i * N + n, acc[i]);
    }
    for (; n < N; n++)
        for (int i = 0; i < mb; i++) {
            float s = 0.f;
            for (int k = 0; k < Kd; k++) s += A[i * Kd + k] * Bm[k * N + n];
            C[i * N + n] = s;
        }
}

static void gemm_nn(int M, int N, int Kd, const float *A, const float *Bm, float *C) {
    for (int m = 0; m < M; m += 8) {
#define AXPY(NB) axpy_block(N, Kd, A + m * Kd, Bm, C + m * N, NB)
        WITH_CONSTANT_UP_TO_8(M - m < 8 ? M - m : 8, AXPY)
#undef AXPY
    }
}

/* out[o][b0 .. b0 + VW] for o in o0 .. o0 + nb: a row of W broadcast against VW images of a (n_in, B) */
ALWAYS void fc_lanes(const float *a, int n_in, int B, const float *w, float *out, int o0, int b0, const int nb) {
    vf acc[8];
    for (int o = 0; o < nb; o++) acc[o] = vsplat(0.f);
    for (int i = 0; i < n_in; i++) {
        const vf av = vload(a + i * B + b0);
        for (int o = 0; o < nb; o++) acc[o] += w[(o0 + o) * n_in + i] * av;
    }
    for (int o = 0; o < nb; o++) vstore(out + (o0 + o) * B + b0, acc[o]);
}

static void fc_block(const float *a, int n_in, int B, const float *w, float *out, int o0, int b0, int nb) {
#define LANES(NB) fc_lanes(a, n_in, B, w, out, o0, b0, NB)
    WITH_CONSTANT_UP_TO_8(nb, LANES)
#undef LANES
}

/* out (n_out, B) = W a, a (n_in, B): VW images a vector, the last VW overlapping (the same values written twice);
 * fewer than VW images one by one */
static void fc_product(const float *a, int n_in, int n_out, int B, const float *w, float *out) {
    if (B < VW) {
        for (int o = 0; o < n_out; o++)
            for (int b = 0; b < B; b++) {
                float s = 0.f;
                for (int i = 0; i < n_in; i++) s += w[o * n_in + i] * a[i * B + b];
                out[o * B + b] = s;
            }
        return;
    }
    for (int o0 = 0; o0 < n_out; o0 += 8) {
        const int nb = n_out - o0 < 8 ? n_out - o0 : 8;
        for (int b0 = 0; b0 + VW <= B; b0 += VW) fc_block(a, n_in, B, w, out, o0, b0, nb);
        if (B % VW) fc_block(a, n_in, B, w, out, o0, B - VW, nb);
    }
}

static void transpose(int R, int Cn, const float *src, float *dst) {
    for (int i = 0; i < R; i++)
        for (int j = 0; j < Cn; j++) dst[j * R + i] = src[i * Cn + j];
}

/* out (n_out, B) = W a + bias, then the ReLU where relu; a (n_in, B) */
static void fc_fwd(const float *a, int n_in, int n_out, int B, const float *w, const float *bias, float *out,
                   int relu) {
    fc_product(a, n_in, n_out, B, w, out);
    for (int o = 0; o < n_out; o++) {
        float *row = out + o * B;
        for (int b = 0; b < B; b++) row[b] += bias[o];
        if (relu)
            for (int b = 0; b < B; b++) row[b] = (row[b] > 0.f || row[b] != row[b]) ? row[b] : 0.f;
    }
}

/* dW = g a^T, db = sum_b g, and (da != NULL) da = (W^T g) * (a > 0); s1, s2: scratch of max(n_in, n_out) * B */
static void fc_bwd(const float *a, int n_in, int n_out, int B, const float *w, const float *g, float *dw, float *db,
                   float *da, float *s1, float *s2) {
    transpose(n_in, B, a, s1);         /* a^T (B, n_in) */
    gemm_nn(n_out, n_in, B, g, s1, dw); /* rows of dW as lanes */
    for (int o = 0; o < n_out; o++) {
        float s = 0.f;
        for (int b = 0; b < B; b++) s += g[o * B + b];
        db[o] = s;
    }
    if (!da) return;
    transpose(n_out, B, g, s1);          /* g^T (B, n_out) */
    gemm_nn(B, n_in, n_out, s1, w, s2); /* (W^T g)^T (B, n_in) */
    transpose(B, n_in, s2, da);
    for (int j = 0; j < n_in * B; j++) da[j] *= (float)(a[j] > 0.f);
}

/* ---------------------------------------------------------------- the step */
static int64_t param_count(int n_conv, const int *cg, int n_fc, const int *fg, int64_t *sizes) {
    int64_t total = 0;
    int t = 0;
    for (int l = 0; l < n_conv; l++) {
        const int *g = cg + l * NG;
        sizes[t++] = (int64_t)g[GO] * g[GC] * g[GK] * g[GK];
        sizes[t++] = g[GO];
    }
    for (int j = 0; j < n_fc; j++) {
        sizes[t++] = (int64_t)fg[2 * j] * fg[2 * j + 1];
        sizes[t++] = fg[2 * j + 1];
    }
    for (int i = 0; i < t; i++) total += sizes[i];
    return total;
}

#define MAXT 64

/* out = p - lr (g + wd p), rounded as PyTorch's foreach ops round it (fedrepro.learning.net.sgd): each product and
 * sum on its own, not fused */
__attribute__((optimize("fp-contract=off"))) static void sgd_update(int64_t n, const float *p, const float *g,
                                                                      float *out, float lr, float wd) {
    for (int64_t j = 0; j < n; j++) {
        float s = p[j] * wd;
        s += g[j];
        s *= lr;
        out[j] = p[j] - s;
    }
}

/* the largest activation of a convolution (input or output, B images) and the widest fully connected layer */
static void extents(int B, int n_conv, const int *cg, int n_fc, const int *fg, int64_t *big, int64_t *feat) {
    *big = *feat = 0;
    for (int l = 0; l < n_conv; l++) {
        const int *g = cg + l * NG;
        const int64_t zs = (int64_t)g[GO] * g[GHO] * g[GWO] * B, ins = (int64_t)g[GC] * g[GH] * g[GW] * B;
        if (zs > *big) *big = zs;
        if (ins > *big) *big = ins;
    }
    for (int j = 0; j < 2 * n_fc; j++)
        if (fg[j] > *feat) *feat = fg[j];
}

/* One network: its geometry, B images a client. */
typedef struct {
    int B, n_conv, n_fc, pool;
    const int *cg, *fg;
    int64_t sizes[MAXT]; /* floats of each parameter, conv weights and biases then fc weights and biases */
    int64_t n_params, big, feat, n_saved;
} Net;

/* What a client's backward reads from its forward, batch-last: the input, each convolution's pooled output and
 * its pooling positions, each fully connected layer's output (the last: the logits). */
typedef struct {
    float *in0, *h[8], *idx[8], *a[16];
} Saved;

/* A client's scratch: a convolution's output before pooling (forward) or its gradient (backward), a data gradient,
 * and four fully connected layers' worth. */
typedef struct {
    float *zd, *dh, *ga, *gb, *at, *at2;
} Scratch;

/* the next len floats from base + *off (NULL where base is: a layout's size only) */
static float *take(float *base, int64_t *off, int64_t len) {
    float *p = base ? base + *off : 0;
    *off += len;
    return p;
}

/* Saved laid out from base (NULL: its size only); returns its floats */
static int64_t carve_saved(const Net *n, float *base, Saved *s) {
    const int B = n->B;
    int64_t off = 0;
    s->in0 = take(base, &off, (int64_t)n->cg[GC] * n->cg[GH] * n->cg[GW] * B);
    for (int l = 0; l < n->n_conv; l++) {
        const int *g = n->cg + l * NG;
        const int64_t hs = (int64_t)g[GO] * g[GHP] * g[GWP] * B;
        s->h[l] = take(base, &off, hs);
        s->idx[l] = take(base, &off, hs);
    }
    for (int j = 0; j < n->n_fc; j++) s->a[j] = take(base, &off, (int64_t)n->fg[2 * j + 1] * B);
    return off;
}

/* Scratch laid out from base (NULL: its size only); returns its floats */
static int64_t carve_scratch(const Net *n, float *base, Scratch *w) {
    const int64_t fb = n->feat * n->B;
    int64_t off = 0;
    w->zd = take(base, &off, n->big);
    w->dh = take(base, &off, n->big);
    w->ga = take(base, &off, fb);
    w->gb = take(base, &off, fb);
    w->at = take(base, &off, fb);
    w->at2 = take(base, &off, fb);
    return off;
}

static Net net_of(int B, int n_conv, const int *cg, int n_fc, const int *fg, int pool) {
    Net n = {.B = B, .n_conv = n_conv, .n_fc = n_fc, .pool = pool, .cg = cg, .fg = fg};
    n.n_params = param_count(n_conv, cg, n_fc, fg, n.sizes);
    extents(B, n_conv, cg, n_fc, fg, &n.big, &n.feat);
    Saved unused;
    n.n_saved = carve_saved(&n, 0, &unused);
    return n;
}

static int n_classes(const Net *n) { return n->fg[2 * n->n_fc - 1]; }

/* the client's parameters (P) and gradients (G) of client kc in tensors of K clients */
static void client_tensors(const Net *n, float *const *all, int kc, float **each) {
    for (int t = 0; t < 2 * (n->n_conv + n->n_fc); t++) each[t] = all[t] + kc * n->sizes[t];
}

/* one client's forward: its input xk (B, C, H, W) into s, the logits at s->a[n_fc - 1] (n_classes, B) */
static void client_forward(const Net *n, float *const *P, const float *xk, const Saved *s, float *zbuf) {
    const int B = n->B, m = n->cg[GC] * n->cg[GH] * n->cg[GW];
    for (int b = 0; b < B; b++)
        for (int j = 0; j < m; j++) s->in0[j * B + b] = xk[b * m + j];
    const float *cur = s->in0;
    for (int l = 0; l < n->n_conv; l++) {
        const int *g = n->cg + l * NG;
        conv_fwd(cur, g, B, P[2 * l], P[2 * l + 1], zbuf);
        pool_relu(zbuf, g, B, n->pool, s->h[l], s->idx[l]);
        cur = s->h[l];
    }
    for (int j = 0; j < n->n_fc; j++) {
        const int t = 2 * (n->n_conv + j);
        fc_fwd(j ? s->a[j - 1] : cur, n->fg[2 * j], n->fg[2 * j + 1], B, P[t], P[t + 1], s->a[j], j < n->n_fc - 1);
    }
}

/* one client's backward from the logits' gradient in w->ga (n_classes, B): every parameter's gradient into G */
static void client_backward(const Net *n, float *const *P, const Saved *s, float *const *G, Scratch *w) {
    const int B = n->B, n_conv = n->n_conv;
    const float *fin = n_conv ? s->h[n_conv - 1] : s->in0;
    float *g = w->ga, *gn = w->gb;
    for (int j = n->n_fc - 1; j >= 0; j--) {
        const int t = 2 * (n_conv + j);
        const float *ain = j ? s->a[j - 1] : fin;
        const int want = j > 0 || n_conv > 0;
        fc_bwd(ain, n->fg[2 * j], n->fg[2 * j + 1], B, P[t], g, G[t], G[t + 1], want ? gn : 0, w->at, w->at2);
        float *tmp = g; g = gn; gn = tmp;
    }
    /* g: the gradient at the last pooled output (already through its ReLU) */
    for (int l = n_conv - 1; l >= 0; l--) {
        const int *cgl = n->cg + l * NG;
        unpool(g, s->idx[l], cgl, B, n->pool, w->zd);
        const float *lin = l ? s->h[l - 1] : s->in0;
        conv_wgrad(lin, cgl, B, w->zd, G[2 * l], G[2 * l + 1]);
        if (l == 0) break;
        conv_dgrad(cgl, B, P[2 * l], w->zd, w->dh);
        const int64_t m = (int64_t)cgl[GC] * cgl[GH] * cgl[GW] * B;
        for (int64_t j = 0; j < m; j++) w->dh[j] *= (float)(lin[j] > 0.f);
        g = w->dh; /* read once by the next layer's unpooling, before its own dgrad writes dh again */
    }
}

/* floats of what one client's forward keeps for its backward (convnet_forward's ``saved``, a client's row) */
int64_t convnet_saved_floats(int B, int n_conv, const int *cg, int n_fc, const int *fg) {
    return net_of(B, n_conv, cg, n_fc, fg, 1).n_saved;
}

/* floats of one thread's workspace (any of the entry points below) */
int64_t convnet_workspace_floats(int B, int n_conv, const int *cg, int n_fc, const int *fg) {
    const Net n = net_of(B, n_conv, cg, n_fc, fg, 1);
    Scratch unused;
    return n.n_params + n.n_saved + carve_scratch(&n, 0, &unused) + 64;
}

/* K clients, each B rows. params[t] / out[t]: (K, *shape) of parameter t in the order conv weights and biases, then
 * fc weights and biases. x (K, B, C, H, W), y (K, B). sgd: out = p - lr (g + wd p); else out = g. ws: one client's
 * workspace (convnet_workspace_floats). Returns 0, or 1 + the client whose label is out of range. */
int convnet_step(int K, int B, int n_conv, const int *cg, int n_fc, const int *fg, int pool, float *const *params,
                 float *const *out, const float *x, const int64_t *y, float *losses, float lr, float wd, int sgd,
                 float *ws) {
    const Net n = net_of(B, n_conv, cg, n_fc, fg, pool);
    const int T = 2 * (n_conv + n_fc), n_cls = n_classes(&n), m = cg[GC] * cg[GH] * cg[GW];
    float *grad = ws, *G[MAXT];
    Saved s;
    Scratch w;
    carve_scratch(&n, grad + n.n_params + carve_saved(&n, grad + n.n_params, &s), &w);
    G[0] = grad;
    for (int t = 1; t < T; t++) G[t] = G[t - 1] + n.sizes[t - 1];
    for (int kc = 0; kc < K; kc++) {
        float *P[MAXT];
        client_tensors(&n, params, kc, P);
        const int64_t *yk = y + (int64_t)kc * B;
        for (int b = 0; b < B; b++)
            if (yk[b] < 0 || yk[b] >= n_cls) return 1 + kc;
        client_forward(&n, P, x + (int64_t)kc * B * m, &s, w.zd);
        /* cross-entropy and its gradient */
        const float *lg = s.a[n_fc - 1];
        float lsum = 0.f;
        for (int b = 0; b < B; b++) {
            float mx = -INFINITY;
            for (int c = 0; c < n_cls; c++) mx = lg[c * B + b] > mx ? lg[c * B + b] : mx;
            float sum = 0.f;
            for (int c = 0; c < n_cls; c++) sum += expf(lg[c * B + b] - mx);
            const float lse = mx + logf(sum);
            for (int c = 0; c < n_cls; c++)
                w.ga[c * B + b] = (expf(lg[c * B + b] - lse) - (float)(c == yk[b])) / (float)B;
            lsum += lse - lg[yk[b] * B + b];
        }
        losses[kc] = lsum / (float)B;
        client_backward(&n, P, &s, G, &w);
        for (int t = 0; t < T; t++) {
            float *o = out[t] + kc * n.sizes[t];
            if (sgd)
                sgd_update(n.sizes[t], P[t], G[t], o, lr, wd);
            else
                memcpy(o, G[t], sizeof(float) * n.sizes[t]);
        }
    }
    return 0;
}

/* The forward of K clients alone: logits (K, B, n_classes), and saved (K, convnet_saved_floats) for
 * convnet_backward. */
void convnet_forward(int K, int B, int n_conv, const int *cg, int n_fc, const int *fg, int pool,
                     float *const *params, const float *x, float *logits, float *saved, float *ws) {
    const Net n = net_of(B, n_conv, cg, n_fc, fg, pool);
    const int n_cls = n_classes(&n), m = cg[GC] * cg[GH] * cg[GW];
    Scratch w;
    carve_scratch(&n, ws, &w);
    for (int kc = 0; kc < K; kc++) {
        float *P[MAXT];
        Saved s;
        client_tensors(&n, params, kc, P);
        carve_saved(&n, saved + kc * n.n_saved, &s);
        client_forward(&n, P, x + (int64_t)kc * B * m, &s, w.zd);
        transpose(n_cls, B, s.a[n_fc - 1], logits + (int64_t)kc * B * n_cls);
    }
}

/* The backward of K clients from their logits' gradients dlogits (K, B, n_classes) and convnet_forward's saved:
 * every parameter's gradient into grads[t] (K, *shape). */
void convnet_backward(int K, int B, int n_conv, const int *cg, int n_fc, const int *fg, int pool,
                      float *const *params, float *saved, const float *dlogits, float *const *grads, float *ws) {
    const Net n = net_of(B, n_conv, cg, n_fc, fg, pool);
    const int n_cls = n_classes(&n);
    Scratch w;
    carve_scratch(&n, ws, &w);
    for (int kc = 0; kc < K; kc++) {
        float *P[MAXT], *G[MAXT];
        Saved s;
        client_tensors(&n, params, kc, P);
        client_tensors(&n, grads, kc, G);
        carve_saved(&n, saved + kc * n.n_saved, &s);
        transpose(B, n_cls, dlogits + (int64_t)kc * B * n_cls, w.ga);
        client_backward(&n, P, &s, G, &w);
    }
}

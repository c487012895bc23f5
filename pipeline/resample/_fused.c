/* The compiled CPU kernels for reprojected maps (line maps): nearest, bilinear and average, one pass over each
 * destination pixel, every tap read and weighed in a loop, no array temporaries. Called through ctypes
 * (pipeline/resample/compiled.py), which releases the GIL for the whole call.
 *
 * They compute what the NumPy kernels compute (pipeline/resample/point.py, footprint.py) in the same
 * operations and order, so they give the same bits (tests/test_compiled.py): positions along each segment
 * as x0 + dx * (t0 + j) less the window's whole offsets (exact), in the NumPy kernels' precision (float64 for
 * nearest, float32 for the footprints), GDAL's floors and nudges, the same float32 sums per tap row, the same
 * rounding. That needs IEEE arithmetic as written: built with -ffp-contract=off (no fused multiply-adds;
 * pyproject.toml) and never with -ffast-math (-fno-trapping-math only lets gcc compute both sides of a select,
 * which changes no value). The average's taps are made once per map and source shape (average_taps) and kept
 * with the map, as the NumPy kernel keeps its own: in planes, each made by branch-free loops over a row that gcc
 * vectorizes, so that the sums can read four neighbouring pixels' weights at once (SSE2, x86-64's
 * baseline: four pixels a step wherever their footprints lie inside a source without nodata). The bilinear
 * prefilters the source and its validity by the stretched kernel's tent, then interpolates at each centre.
 *
 * Arrays are C-contiguous (the Python side makes them so). A Python extension module by name only (its
 * init makes an empty module), so that setuptools builds it and importlib finds it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define EPS32 1e-10f
#define MIN_WEIGHT32 1e-6f
#define HALF32 0.5f
#define INDEX_BOUND 1073741824.0
#define MAX_REACH 65536.0 /* taps along an axis past which average_reach leaves a map to the NumPy kernel */
#define KERNELS_ABI 8      /* what kernels_abi() returns; compiled.py checks it (bump with any change here) */

/* This file's version, so that a library built from an older one is not used (compiled.py). */
int kernels_abi(void) { return KERNELS_ABI; }

typedef struct {
    const int64_t *row_ptr, *col, *count;
    const double *t0, *x0, *dx, *y0, *dy;
    double xoff, yoff; /* the window's whole offsets in the tile, subtracted last (LineMap.offset_xy) */
} segments_t;

/* Positions of lattice row r in float32 (LineMap.positions(np, r, r + 1, "f4")). */
static void row_positions_f4(const segments_t *g, int64_t r, float *xs, float *ys) {
    for (int64_t s = g->row_ptr[r]; s < g->row_ptr[r + 1]; s++) {
        const int64_t c0 = g->col[s], n = g->count[s];
        const float t0s = (float)g->t0[s], dxs = (float)g->dx[s], dys = (float)g->dy[s];
        const float x0s = (float)g->x0[s], y0s = (float)g->y0[s];
        const float xo = (float)g->xoff, yo = (float)g->yoff;
        for (int64_t j = 0; j < n; j++) {
            const float t = t0s + (float)j;
            const float px = dxs * t;
            const float py = dys * t;
            const float x = px + x0s;
            const float y = py + y0s;
            xs[c0 + j] = x - xo;
            ys[c0 + j] = y - yo;
        }
    }
}

/* Where a segment's centres fall, in a loop that gcc vectorizes: the source column and row of each centre
 * (GDAL floors x + 1e-10, added to the segment's start in float64) into xi, yi and whether it lies on the
 * source into ok. A position lies on the source when floor(x) >= 0 and floor(x) < w_s, that is when
 * x >= 0 and x < w_s (w_s a whole number; NaN fails both), and there truncation is the floor. */
static void segment_centres(const segments_t *g, int64_t s, const double *restrict steps, int64_t h_s, int64_t w_s,
                            int32_t *restrict xi, int32_t *restrict yi, int32_t *restrict ok) {
    const int64_t n = g->count[s];
    const double xs0 = g->x0[s] + 1e-10, ys0 = g->y0[s] + 1e-10;
    const double dxs = g->dx[s], dys = g->dy[s], t0s = g->t0[s];
    const double fw = (double)w_s, fh = (double)h_s;
    for (int64_t j = 0; j < n; j++) {
        const double t = t0s + steps[j];
        const double px = dxs * t;
        const double py = dys * t;
        const double xt = px + xs0;
        const double yt = py + ys0;
        const double x = xt - g->xoff;
        const double y = yt - g->yoff;
        const int on = (x >= 0.0) & (x < fw) & (y >= 0.0) & (y < fh);
        xi[j] = (int32_t)(on ? x : 0.0);
        yi[j] = (int32_t)(on ? y : 0.0);
        ok[j] = on;
    }
}

/* Nearest on a line map of pixel centres: the source pixel containing each centre; fill off the source.
 * One loop per item size (copied as unsigned integers of that size). */
#define NEAREST(N, T)                                                                                            \
    static void nearest_##N(const T *src, int64_t h_s, int64_t w_s, T fill, const segments_t *g, T *out,        \
                            int64_t h, int64_t w, const double *steps, int32_t *xi, int32_t *yi, int32_t *ok) {  \
        for (int64_t r = 0; r < h; r++) {                                                                      \
            for (int64_t s = g->row_ptr[r]; s < g->row_ptr[r + 1]; s++) {                                      \
                const int64_t n = g->count[s];                                                                 \
                segment_centres(g, s, steps, h_s, w_s, xi, yi, ok);                                            \
                T *o = out + r * w + g->col[s];                                                                \
                for (int64_t j = 0; j < n; j++) o[j] = ok[j] ? src[(int64_t)yi[j] * w_s + xi[j]] : fill;      \
            }                                                                                                  \
        }                                                                                                      \
    }

NEAREST(1, uint8_t)
NEAREST(2, uint16_t)
NEAREST(4, uint32_t)
NEAREST(8, uint64_t)

/* Nearest for sources of 1, 2, 4 or 8 bytes a pixel (-3 for any other size, or a source of 2^31 pixels a
 * side or more: the NumPy kernel takes it). */
int nearest_lines(const char *src, int64_t h_s, int64_t w_s, int64_t itemsize, const char *fill,
                  const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                  const double *x0, const double *dx, const double *y0, const double *dy, double xoff, double yoff, char *out,
                  int64_t h, int64_t w) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy, xoff, yoff};
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) return -3;
    if (h_s >= 2147483647 || w_s >= 2147483647) return -3;
    int64_t most = 1; /* the longest segment */
    for (int64_t s = 0; s < row_ptr[h]; s++) most = count[s] > most ? count[s] : most;
    double *steps = (double *)malloc(sizeof(double) * (size_t)most);
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * 3 * (size_t)most);
    if (steps == NULL || idx == NULL) {
        free(steps);
        free(idx);
        return -1;
    }
    for (int64_t j = 0; j < most; j++) steps[j] = (double)j;
    int32_t *xi = idx, *yi = idx + most, *ok = idx + 2 * most;
    switch (itemsize) {
        case 1: nearest_1((const uint8_t *)src, h_s, w_s, *(const uint8_t *)fill, &g, (uint8_t *)out, h, w, steps, xi, yi, ok); break;
        case 2: {
            uint16_t f;
            memcpy(&f, fill, 2);
            nearest_2((const uint16_t *)src, h_s, w_s, f, &g, (uint16_t *)out, h, w, steps, xi, yi, ok);
            break;
        }
        case 4: {
            uint32_t f;
            memcpy(&f, fill, 4);
            nearest_4((const uint32_t *)src, h_s, w_s, f, &g, (uint32_t *)out, h, w, steps, xi, yi, ok);
            break;
        }
        default: {
            uint64_t f;
            memcpy(&f, fill, 8);
            nearest_8((const uint64_t *)src, h_s, w_s, f, &g, (uint64_t *)out, h, w, steps, xi, yi, ok);
            break;
        }
    }
    free(steps);
    free(idx);
    return 0;
}

/* floorf(x), with NaN and magnitudes past 2^63 taken to -2^63: such positions (a transform that failed)
 * land far off the source, whose taps then weigh nothing, as the NumPy kernels' int32 indices send them.
 * Without libm's call (x86-64's baseline has no SSE4.1 round) and without a branch, so that loops over a
 * row vectorize: below 2^23 through int32 (truncation, exact there), from 2^23 on a float is an integer. */
static inline float floor_via_int64(float x) {
    const int small = fabsf(x) < 8388608.0f;
    const float t = (float)(int32_t)(small ? x : 0.0f);
    const float f = small ? t - (t > x ? 1.0f : 0.0f) : x;
    return fabsf(f) < 9.223372036854775808e18f ? f : -9.223372036854775808e18f; /* (NaN fails the test) */
}

/* One axis of a row's footprints, ordered: the top-left corner of pixel c (row a) and its bottom-right
 * (row b), swapped where reversed, as the NumPy kernel orders them. */
static void row_order(const float *restrict pa, const float *restrict pb, int64_t w, float *restrict lo,
                      float *restrict hi) {
    for (int64_t c = 0; c < w; c++) {
        const float p = pa[c], q = pb[c + 1];
        const int swap = q < p;
        lo[c] = swap ? q : p;
        hi[c] = swap ? p : q;
    }
}

/* Each footprint's extent from its first pixel along one axis: hi - floor(lo + EPS32). */
static void row_extent(const float *restrict lo, const float *restrict hi, int64_t w, float *restrict out) {
    for (int64_t c = 0; c < w; c++) out[c] = hi[c] - floor_via_int64(lo[c] + EPS32);
}

/* The greatest of e[0..n) into *most (NaN left out), and whether any is NaN into *nan. */
static void greatest(const float *e, int64_t n, float *most, int *nan) {
    int64_t c = 0;
    float m = *most;
    int bad = 0;
#if defined(__SSE2__)
    __m128 mv = _mm_set1_ps(m), badv = _mm_setzero_ps();
    for (; c + 4 <= n; c += 4) {
        const __m128 v = _mm_loadu_ps(e + c);
        badv = _mm_or_ps(badv, _mm_cmpunord_ps(v, v));
        mv = _mm_max_ps(v, mv); /* (a NaN in v gives the second operand) */
    }
    float lanes[4];
    _mm_storeu_ps(lanes, mv);
    for (int k = 0; k < 4; k++) m = lanes[k] > m ? lanes[k] : m;
    bad = _mm_movemask_ps(badv) != 0;
#endif
    for (; c < n; c++) {
        bad |= e[c] != e[c];
        m = e[c] > m ? e[c] : m;
    }
    *most = m;
    *nan |= bad;
}

typedef struct {
    float *buf, *xa, *ya, *xb, *yb, *yl, *yh, *xl, *xh, *t, *u;
} rows_t;

/* Row buffers: two rows of corner positions (w + 1 each), a row's boxes and two scratch rows. */
static int alloc_rows(int64_t w, rows_t *r) {
    const int64_t n = w + 1;
    float *buf = (float *)malloc(sizeof(float) * 10 * (size_t)n);
    if (buf == NULL) return -1;
    *r = (rows_t){buf, buf, buf + n, buf + 2 * n, buf + 3 * n, buf + 4 * n, buf + 5 * n, buf + 6 * n,
                  buf + 7 * n, buf + 8 * n, buf + 9 * n};
    return 0;
}

/* Row r's footprints (its corners' positions in row r + 1 made, row r's kept from the last call). */
static void next_row(const segments_t *g, int64_t r, int64_t w, rows_t *b) {
    row_positions_f4(g, r + 1, b->xb, b->yb);
    row_order(b->ya, b->yb, w, b->yl, b->yh);
    row_order(b->xa, b->xb, w, b->xl, b->xh);
}

static void swap_rows(rows_t *b) {
    float *t = b->xa; b->xa = b->xb; b->xb = t;
    t = b->ya; b->ya = b->yb; b->yb = t;
}

/* The most taps any footprint of the map needs along y and along x, into reach[0], reach[1]: the ceiling
 * of each footprint's extent less 1e-10, found as the ceiling of the greatest extent (the ceiling is
 * monotonic). -4 where an extent is NaN or the reach absurd (NaN, infinite or absurdly far corners: the
 * NumPy kernel judges those). */
int average_reach(const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                  const double *x0, const double *dx, const double *y0, const double *dy, double xoff, double yoff,
                  int64_t h, int64_t w, int64_t *reach) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy, xoff, yoff};
    rows_t b;
    if (alloc_rows(w, &b)) return -1;
    float most[2] = {-INFINITY, -INFINITY};
    int nan = 0;
    row_positions_f4(&g, 0, b.xa, b.ya);
    for (int64_t r = 0; r < h; r++) {
        next_row(&g, r, w, &b);
        row_extent(b.yl, b.yh, w, b.t);
        greatest(b.t, w, &most[0], &nan);
        row_extent(b.xl, b.xh, w, b.t);
        greatest(b.t, w, &most[1], &nan);
        swap_rows(&b);
    }
    free(b.buf);
    for (int axis = 0; axis < 2; axis++) {
        const double n = ceil((double)most[axis] - 1e-10);
        if (nan || !(n < MAX_REACH)) return -4;
        reach[axis] = n > 1.0 ? (int64_t)n : 1;
    }
    return 0;
}

/* One axis of a row's footprints (common._footprint_taps in float32): the first source index (bounded)
 * into first[c] and k_max weights (0 past the footprint) into wts[k * stride + c]. A footprint that ends
 * within its first pixel (u <= 1, of no length too) weighs it 1, as GDAL's average does. */
static void row_taps(const float *restrict lo, const float *restrict hi, int64_t w, int64_t k_max, int64_t stride,
                     int32_t *restrict first, float *restrict wts, float *restrict f_row, float *restrict u_row) {
    for (int64_t c = 0; c < w; c++) {
        const float f = floor_via_int64(lo[c] + EPS32);
        const float u = hi[c] - f;
        const float a = lo[c] - f;
        f_row[c] = f;
        u_row[c] = u;
        wts[c] = u <= 1.0f ? 1.0f : 1.0f - a;
    }
    for (int64_t k = 1; k < k_max; k++) {
        float *restrict wk = wts + k * stride;
        for (int64_t c = 0; c < w; c++) {
            const float v = u_row[c] - (float)k;
            wk[c] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
        }
    }
    for (int64_t c = 0; c < w; c++) { /* (float compares: the same bound as in double, 2^30 being exact) */
        const float f = f_row[c];
        first[c] = (int32_t)(f < -1073741824.0f ? -1073741824.0f : (f > 1073741824.0f ? 1073741824.0f : f));
    }
}

/* Every pixel's footprint taps, in planes of h * w values, `stride` values apart (one buffer, planes
 * padded so that they do not share cache sets): the first row (int32), the first column (int32), ky
 * weights along y, kx along x, and the weight sum of a source without nodata. */
int average_taps(const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                 const double *x0, const double *dx, const double *y0, const double *dy, double xoff, double yoff,
                 int64_t h, int64_t w, int64_t src_h, int64_t src_w, float *taps, int64_t stride, int64_t ky, int64_t kx) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy, xoff, yoff};
    rows_t b;
    if (alloc_rows(w, &b)) return -1;
    int32_t *first_y = (int32_t *)taps, *first_x = (int32_t *)(taps + stride);
    float *wy = taps + 2 * stride, *wx = taps + (2 + ky) * stride, *overlap = taps + (2 + ky + kx) * stride;
    const int32_t sh = (int32_t)(src_h < 2147483647 ? src_h : 2147483647);
    const int32_t sw = (int32_t)(src_w < 2147483647 ? src_w : 2147483647);
    row_positions_f4(&g, 0, b.xa, b.ya);
    for (int64_t r = 0; r < h; r++) {
        next_row(&g, r, w, &b);
        const int64_t p = r * w;
        row_taps(b.yl, b.yh, w, ky, stride, first_y + p, wy + p, b.t, b.u);
        row_taps(b.xl, b.xh, w, kx, stride, first_x + p, wx + p, b.t, b.u);
        /* The weight sum of a source without nodata: pixel_*'s sums with every tap on the source valid, in
         * its order (weighted.valid_weight_sum), so a pixel whose taps all hold data has the same bits
         * whether or not its window holds nodata elsewhere. Branch-free loops over the row (a tap off the
         * source adds 0, as one skipped adds nothing), which gcc vectorizes; b.t and b.u are free again. */
        const int32_t *fy = first_y + p, *fx = first_x + p; /* (bounded by 2^30: + k stays in int32) */
        float *restrict vrow = b.t, *restrict ov = overlap + p;
        for (int64_t c = 0; c < w; c++) vrow[c] = 0.0f;
        for (int64_t k = 0; k < kx; k++) {
            const float *restrict wk = wx + k * stride + p;
            for (int64_t c = 0; c < w; c++) {
                const int32_t ix = fx[c] + (int32_t)k;
                vrow[c] += (float)((ix >= 0) & (ix < sw)) * wk[c]; /* (w * 1 is w, w * 0 is 0) */
            }
        }
        for (int64_t c = 0; c < w; c++) ov[c] = 0.0f;
        for (int64_t k = 0; k < ky; k++) {
            const float *restrict wk = wy + k * stride + p;
            for (int64_t c = 0; c < w; c++) {
                const int32_t iy = fy[c] + (int32_t)k;
                const float tv = ((float)((iy >= 0) & (iy < sh)) * vrow[c]) * wk[c];
                ov[c] += tv;
            }
        }
        swap_rows(&b);
    }
    free(b.buf);
    return 0;
}

/* Whether a source value holds data (common.valid_mask): not nodata where test_value, not NaN where
 * test_nan; compared in float64, nodata already in the source's float type. */
#define VALID(SUFFIX, T)                                                                                         \
    static inline int valid_##SUFFIX(T v, int test_value, double nodata, int test_nan) {                        \
        const double x = (double)v;                                                                            \
        if (test_nan && x != x) return 0;                                                                      \
        return !(test_value && x == nodata);                                                                   \
    }

/* The arguments every pixel of a weighted_sums call shares. */
typedef struct {
    int64_t h_s, w_s;
    int test_value, test_nan, all_valid, integer, unsigned_convex;
    double nodata;
    const int32_t *first_y, *first_x;
    const float *wy, *wx, *overlap;
    int64_t stride, ny, nx;
    float lo, hi;
} sums_t;

static inline int tap_inside(const sums_t *a, int64_t iy0, int64_t ix0) {
    return iy0 >= 0 && iy0 + a->ny <= a->h_s && ix0 >= 0 && ix0 + a->nx <= a->w_s;
}

/* A pixel's value from its sums: fill where no weight; else the mean with GDAL's rounding (half up for
 * integers; unsigned_convex: a cast truncates a non-negative mean, no clip). */
#define FINISH(SUFFIX, T)                                                                                        \
    static inline T finish_##SUFFIX(const sums_t *a, float acc, float wsum, T fill) {                           \
        if (!(wsum > MIN_WEIGHT32)) return fill;                                                               \
        float value = acc / wsum;                                                                              \
        if (a->integer) {                                                                                      \
            value = value + HALF32;                                                                            \
            if (!a->unsigned_convex) {                                                                         \
                value = floor_via_int64(value);                                                                \
                value = value < a->lo ? a->lo : value;                                                         \
                value = value > a->hi ? a->hi : value;                                                         \
            }                                                                                                  \
        }                                                                                                      \
        return (T)value;                                                                                       \
    }

/* One pixel: Σ w·v / Σ w·valid over its taps in float32, in the NumPy kernels' order (along x for each tap
 * row, times that row's weight, rows added in turn); taps off the source or without data add nothing.
 * Without nodata the weight sum is the one average_taps made. (A branch per tap, not a select: masks come
 * in blobs, whose branches the core predicts.) */
#define PIXEL(SUFFIX, T)                                                                                         \
    static inline T pixel_##SUFFIX(const sums_t *a, const T *src, int64_t p, T fill) {                          \
        const int64_t iy0 = a->first_y[p], ix0 = a->first_x[p], w_s = a->w_s, st = a->stride;                  \
        const float *wyp = a->wy + p, *wxp = a->wx + p; /* (tap k at [k * stride]) */                          \
        float acc = 0.0f, wsum = 0.0f;                                                                         \
        if (tap_inside(a, iy0, ix0)) {                                                                         \
            for (int64_t ky = 0; ky < a->ny; ky++) {                                                           \
                const T *s = src + (iy0 + ky) * w_s + ix0;                                                     \
                float row = 0.0f, vrow = 0.0f;                                                                 \
                for (int64_t kx = 0; kx < a->nx; kx++) {                                                       \
                    const T v = s[kx];                                                                         \
                    if (a->all_valid || valid_##SUFFIX(v, a->test_value, a->nodata, a->test_nan)) {            \
                        const float t = wxp[kx * st] * (float)v;                                               \
                        row += t;                                                                              \
                        vrow += wxp[kx * st];                                                                  \
                    }                                                                                          \
                }                                                                                              \
                const float t = row * wyp[ky * st];                                                            \
                acc += t;                                                                                      \
                const float tv = vrow * wyp[ky * st];                                                          \
                wsum += tv;                                                                                    \
            }                                                                                                  \
        } else {                                                                                               \
            for (int64_t ky = 0; ky < a->ny; ky++) {                                                           \
                const int64_t iy = iy0 + ky;                                                                   \
                float row = 0.0f, vrow = 0.0f;                                                                 \
                if (iy >= 0 && iy < a->h_s) {                                                                  \
                    for (int64_t kx = 0; kx < a->nx; kx++) {                                                   \
                        const int64_t ix = ix0 + kx;                                                           \
                        if (ix >= 0 && ix < w_s) {                                                             \
                            const T v = src[iy * w_s + ix];                                                    \
                            if (a->all_valid || valid_##SUFFIX(v, a->test_value, a->nodata, a->test_nan)) {    \
                                const float t = wxp[kx * st] * (float)v;                                       \
                                row += t;                                                                      \
                                vrow += wxp[kx * st];                                                          \
                            }                                                                                  \
                        }                                                                                      \
                    }                                                                                          \
                }                                                                                              \
                const float t = row * wyp[ky * st];                                                            \
                acc += t;                                                                                      \
                const float tv = vrow * wyp[ky * st];                                                          \
                wsum += tv;                                                                                    \
            }                                                                                                  \
        }                                                                                                      \
        if (a->all_valid) wsum = a->overlap[p];                                                                \
        return finish_##SUFFIX(a, acc, wsum, fill);                                                            \
    }

#if defined(__SSE2__)
/* Four pixels at once where all four footprints lie inside a source without nodata: the same products and
 * sums as pixel_*, one per lane (SSE's float32 arithmetic is the scalar's), the source values gathered
 * from the four footprints' rows. Integers of 8 or 16 bits convert to float32 exactly through int32. */
#define GATHER_INT(SUFFIX, T)                                                                                    \
    static inline __m128 gather_##SUFFIX(const T *s, const int64_t *at) {                                       \
        return _mm_cvtepi32_ps(_mm_set_epi32((int32_t)s[at[3]], (int32_t)s[at[2]], (int32_t)s[at[1]],         \
                                             (int32_t)s[at[0]]));                                              \
    }
static inline __m128 gather_f4(const float *s, const int64_t *at) { return _mm_set_ps(s[at[3]], s[at[2]], s[at[1]], s[at[0]]); }
GATHER_INT(u1, uint8_t)
GATHER_INT(i1, int8_t)
GATHER_INT(u2, uint16_t)
GATHER_INT(i2, int16_t)

#define QUAD(SUFFIX, T)                                                                                          \
    static inline int quad_##SUFFIX(const sums_t *a, const T *src, int64_t p, T fill, T *out) {                 \
        int64_t at[4];                                                                                         \
        for (int l = 0; l < 4; l++) {                                                                          \
            const int64_t iy0 = a->first_y[p + l], ix0 = a->first_x[p + l];                                    \
            if (!tap_inside(a, iy0, ix0)) return 0;                                                            \
            at[l] = iy0 * a->w_s + ix0;                                                                        \
        }                                                                                                      \
        const int64_t st = a->stride;                                                                          \
        __m128 acc = _mm_setzero_ps();                                                                         \
        for (int64_t ky = 0; ky < a->ny; ky++) {                                                               \
            const T *s = src + ky * a->w_s;                                                                    \
            __m128 row = _mm_setzero_ps();                                                                     \
            for (int64_t kx = 0; kx < a->nx; kx++) {                                                           \
                const __m128 t = _mm_mul_ps(_mm_loadu_ps(a->wx + kx * st + p), gather_##SUFFIX(s + kx, at));   \
                row = _mm_add_ps(row, t);                                                                      \
            }                                                                                                  \
            acc = _mm_add_ps(acc, _mm_mul_ps(row, _mm_loadu_ps(a->wy + ky * st + p)));                         \
        }                                                                                                      \
        float sums[4];                                                                                         \
        _mm_storeu_ps(sums, acc);                                                                              \
        for (int l = 0; l < 4; l++) out[p + l] = finish_##SUFFIX(a, sums[l], a->overlap[p + l], fill);         \
        return 1;                                                                                              \
    }
#define QUADS(SUFFIX)                                                                                            \
    if (a.all_valid && p + 4 <= n && quad_##SUFFIX(&a, src, p, fill, out)) {                                   \
        p += 4;                                                                                                \
        continue;                                                                                              \
    }
#else
#define QUAD(SUFFIX, T)
#define QUADS(SUFFIX)
#endif

/* The average of each pixel's taps (planar, `stride` values apart: average_taps) over the source: fill
 * where no weight. One function per source type. */
#define WEIGHTED_SUMS(NAME, SUFFIX, T)                                                                           \
    int NAME(const T *src, int64_t h_s, int64_t w_s, int test_value, double nodata, int test_nan, int all_valid, \
             const float *taps, int64_t stride, int64_t ny, int64_t nx, double fill_d, int unsigned_convex,     \
             float lo, float hi, T *out, int64_t h, int64_t w) {                                               \
        const float *wy = taps + 2 * stride, *wx = taps + (2 + ny) * stride;                                   \
        const sums_t a = {h_s, w_s, test_value, test_nan, all_valid, hi > lo, unsigned_convex, nodata,         \
                          (const int32_t *)taps, (const int32_t *)(taps + stride), wy, wx, wx + nx * stride,  \
                          stride, ny, nx, lo, hi};                                                             \
        const T fill = (T)fill_d;                                                                              \
        const int64_t n = h * w;                                                                               \
        for (int64_t p = 0; p < n;) {                                                                          \
            QUADS(SUFFIX)                                                                                      \
            out[p] = pixel_##SUFFIX(&a, src, p, fill);                                                         \
            p++;                                                                                               \
        }                                                                                                      \
        return 0;                                                                                              \
    }

#define KERNELS(SUFFIX, T) VALID(SUFFIX, T) FINISH(SUFFIX, T) PIXEL(SUFFIX, T) QUAD(SUFFIX, T) WEIGHTED_SUMS(weighted_sums_##SUFFIX, SUFFIX, T)

KERNELS(u1, uint8_t)
KERNELS(i1, int8_t)
KERNELS(u2, uint16_t)
KERNELS(i2, int16_t)
KERNELS(f4, float)

/* ---------------------------------------------------------------------------------------------- bilinear
 * Bilinear on a line map of pixel centres where the stretch along each axis is a whole number (1 when not
 * downsampling; 2 from 10 m to 20 m): as point.py's _bilinear_general, the source (nodata as 0) and its
 * validity are prefiltered by the discrete tent 1 - |k|/stretch along x and then along y, and each pixel
 * is then the plain bilinear interpolation of the prefiltered planes at its centre, renormalised by the
 * interpolated validity (without nodata, by the product of the prefiltered row and column profiles). */

/* The tent along x of each row of `a` (h x w, in place): a value plus each neighbour k away times
 * wk[k - 1], k = 1, 2, ..., the neighbour to the right then the one to the left, as _tent_prefilter adds
 * them (neighbours past the edges are zeros: not added). `orig`: w floats of scratch. */
static void tent_x(float *a, int64_t h, int64_t w, int64_t s, const float *wk, float *orig) {
    for (int64_t r = 0; r < h; r++) {
        float *restrict o = a + r * w;
        memcpy(orig, o, sizeof(float) * (size_t)w);
        const float *restrict q = orig;
        for (int64_t k = 1; k < s && k < w; k++) { /* (per value: k = 1, 2, ...; right, then left) */
            const float c = wk[k - 1];
            for (int64_t i = 0; i < w - k; i++) o[i] += q[i + k] * c;
            for (int64_t i = k; i < w; i++) o[i] += q[i - k] * c;
        }
    }
}

/* The tent along y of `a` (h x w, in place), in the same order: the rows above a row were overwritten by
 * then, so their original values are kept in `ring` (s - 1 rows of w) as it goes down; `cur`: w floats. */
static void tent_y(float *a, int64_t h, int64_t w, int64_t s, const float *wk, float *ring, float *cur) {
    for (int64_t r = 0; r < h; r++) {
        float *o = a + r * w;
        memcpy(cur, o, sizeof(float) * (size_t)w);
        for (int64_t k = 1; k < s; k++) {
            if (r + k < h) {
                const float *below = a + (r + k) * w;
                for (int64_t c = 0; c < w; c++) o[c] += below[c] * wk[k - 1];
            }
            if (r - k >= 0) {
                const float *above = ring + ((r - k) % (s - 1)) * w;
                for (int64_t c = 0; c < w; c++) o[c] += above[c] * wk[k - 1];
            }
        }
        if (s > 1) memcpy(ring + (r % (s - 1)) * w, cur, sizeof(float) * (size_t)w);
    }
}

/* Prefilter a plane by the tents along x then y; -1 where out of memory. */
static int tent_plane(float *a, int64_t h, int64_t w, int64_t sx, int64_t sy, const float *wkx, const float *wky) {
    if ((sx <= 1 && sy <= 1) || h <= 0 || w <= 0) return 0;
    const int64_t ring_rows = sy > 1 ? sy - 1 : 0;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(w * (2 + ring_rows)));
    if (buf == NULL) return -1;
    if (sx > 1) tent_x(a, h, w, sx, wkx, buf);
    if (sy > 1) tent_y(a, h, w, sy, wky, buf + 2 * w, buf);
    free(buf);
    return 0;
}

/* A pixel's two taps along one axis from its centre c (_kernel_taps at scale 1: s = c - 0.5, its floor, the
 * fraction f, each weight f * c0 + c1 by the fitted polynomials `coef` = {c0, c1} of tap 0 then tap 1). */
static inline int64_t bilinear_taps(float c, const float *coef, float *w0, float *w1) {
    const float s = c - HALF32;
    const float first = floorf(s);
    const float f = s - first;
    const float a = f * coef[0];
    *w0 = a + coef[1];
    const float b = f * coef[2];
    *w1 = b + coef[3];
    return (int64_t)first;
}

/* Σ over the 2 x 2 taps of plane `p` (zeros off its h x w): along x for each tap row, times that row's
 * weight, the rows added in turn (_gather_mean's order). */
static inline float bilinear_sum(const float *p, int64_t h, int64_t w, int64_t iy, int64_t ix, float wy0, float wy1,
                                 float wx0, float wx1) {
    float v[4];
    if (iy >= 0 && iy + 2 <= h && ix >= 0 && ix + 2 <= w) {
        const float *q = p + iy * w + ix;
        v[0] = q[0], v[1] = q[1], v[2] = q[w], v[3] = q[w + 1];
    } else {
        for (int k = 0; k < 4; k++) {
            const int64_t y = iy + k / 2, x = ix + k % 2;
            v[k] = (y >= 0 && y < h && x >= 0 && x < w) ? p[y * w + x] : 0.0f;
        }
    }
    float row0 = wx0 * v[0];
    const float t01 = wx1 * v[1];
    row0 += t01;
    row0 *= wy0;
    float row1 = wx0 * v[2];
    const float t11 = wx1 * v[3];
    row1 += t11;
    row1 *= wy1;
    return row0 + row1;
}

/* Σ_k w_k · profile[first + k] over the two taps (zeros off the profile): _profile_sum's order. */
static inline float profile_sum(const float *prof, int64_t n, int64_t i, float w0, float w1) {
    const float a = w0 * ((i >= 0 && i < n) ? prof[i] : 0.0f);
    const float b = w1 * ((i + 1 >= 0 && i + 1 < n) ? prof[i + 1] : 0.0f);
    return a + b;
}

/* Bilinear for one source type: `data` (and `valid` unless all_valid) are h_s x w_s float32 planes of
 * scratch the source is converted and prefiltered into; `vx`, `vy` the prefiltered profiles of a source
 * without nodata; `wkx`, `wky` the tents' weights for k = 1 .. stretch - 1; `coef` the taps' polynomials.
 * -1 where out of memory. */
#define BILINEAR(SUFFIX, T)                                                                                      \
    int bilinear_##SUFFIX(const T *src, int64_t h_s, int64_t w_s, int test_value, double nodata, int test_nan,  \
                          int all_valid, int64_t sx, int64_t sy, const float *wkx, const float *wky,            \
                          const float *vx, const float *vy, float *data, float *valid, const float *coef,       \
                          const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,   \
                          const double *x0, const double *dx, const double *y0, const double *dy,              \
                          double xoff, double yoff, double fill_d, float lo, float hi, T *out, int64_t h, int64_t w) {                   \
        const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy, xoff, yoff};                           \
        const int64_t n_s = h_s * w_s;                                                                         \
        for (int64_t i = 0; i < n_s; i++) {                                                                    \
            const T v = src[i];                                                                                \
            const int ok = all_valid || valid_##SUFFIX(v, test_value, nodata, test_nan);                      \
            data[i] = ok ? (float)v : 0.0f;                                                                    \
            if (!all_valid) valid[i] = ok ? 1.0f : 0.0f;                                                       \
        }                                                                                                      \
        if (tent_plane(data, h_s, w_s, sx, sy, wkx, wky) != 0) return -1;                                     \
        if (!all_valid && tent_plane(valid, h_s, w_s, sx, sy, wkx, wky) != 0) return -1;                      \
        const sums_t a = {h_s, w_s, test_value, test_nan, all_valid, hi > lo, 0, nodata, NULL, NULL, NULL,    \
                          NULL, NULL, 0, 2, 2, lo, hi};                                                        \
        const T fill = (T)fill_d;                                                                              \
        const float fw = (float)w_s, fh = (float)h_s;                                                          \
        float *xs = (float *)malloc(sizeof(float) * 2 * (size_t)(w > 0 ? w : 1));                              \
        if (xs == NULL) return -1;                                                                             \
        float *ys = xs + w;                                                                                    \
        for (int64_t r = 0; r < h; r++) {                                                                      \
            row_positions_f4(&g, r, xs, ys);                                                                   \
            T *o = out + r * w;                                                                                \
            for (int64_t c = 0; c < w; c++) {                                                                  \
                const float xc = xs[c], yc = ys[c];                                                            \
                if (!(xc >= 0.0f && xc < fw && yc >= 0.0f && yc < fh)) {                                       \
                    o[c] = fill;                                                                               \
                    continue;                                                                                  \
                }                                                                                              \
                float wy0, wy1, wx0, wx1;                                                                      \
                const int64_t iy = bilinear_taps(yc, coef, &wy0, &wy1);                                       \
                const int64_t ix = bilinear_taps(xc, coef, &wx0, &wx1);                                       \
                const float acc = bilinear_sum(data, h_s, w_s, iy, ix, wy0, wy1, wx0, wx1);                   \
                float wsum;                                                                                    \
                if (all_valid) {                                                                               \
                    const float py = profile_sum(vy, h_s, iy, wy0, wy1);                                       \
                    const float px = profile_sum(vx, w_s, ix, wx0, wx1);                                       \
                    wsum = py * px;                                                                            \
                } else {                                                                                       \
                    wsum = bilinear_sum(valid, h_s, w_s, iy, ix, wy0, wy1, wx0, wx1);                          \
                }                                                                                              \
                o[c] = finish_##SUFFIX(&a, acc, wsum, fill);                                                   \
            }                                                                                                  \
        }                                                                                                      \
        free(xs);                                                                                              \
        return 0;                                                                                              \
    }

BILINEAR(u1, uint8_t)
BILINEAR(i1, int8_t)
BILINEAR(u2, uint16_t)
BILINEAR(i2, int16_t)
BILINEAR(f4, float)

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused",
                                    "The compiled kernels, called through ctypes (pipeline.resample.compiled).",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }

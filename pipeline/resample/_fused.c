/* The compiled CPU kernels for reprojected maps (line maps): nearest and average, one pass over each
 * destination pixel, every tap read and weighed in a loop, no array temporaries. Called through ctypes
 * (pipeline/resample/compiled.py), which releases the GIL for the whole call.
 *
 * They compute what the NumPy kernels compute (pipeline/resample/point.py, footprint.py) in the same
 * operations and order, so they give the same bits (tests/test_compiled.py): positions along each segment
 * as x0 + dx * (t0 + j) in the NumPy kernels' precision (float64 for nearest, float32 for the footprints),
 * GDAL's floors and nudges, the same float32 sums per tap row, the same rounding. That needs IEEE
 * arithmetic as written: built with -ffp-contract=off (no fused multiply-adds; pyproject.toml) and never
 * with -ffast-math. The average's taps are made once per map and source shape (average_taps) and kept
 * with the map, as the NumPy kernel keeps its own.
 *
 * Arrays are C-contiguous (the Python side makes them so). A Python extension module by name only (its
 * init makes an empty module), so that setuptools builds it and importlib finds it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EPS32 1e-10f
#define MIN_WEIGHT32 1e-6f
#define HALF32 0.5f
#define INDEX_BOUND 1073741824.0
#define MAX_REACH 65536.0 /* taps along an axis past which average_reach leaves a map to the NumPy kernel */
#define KERNELS_ABI 2      /* what kernels_abi() returns; compiled.py checks it (bump with any change here) */

/* This file's version, so that a library built from an older one is not used (compiled.py). */
int kernels_abi(void) { return KERNELS_ABI; }

typedef struct {
    const int64_t *row_ptr, *col, *count;
    const double *t0, *x0, *dx, *y0, *dy;
} segments_t;

/* Positions of lattice row r in float32 (LineMap.positions(np, r, r + 1, "f4")). */
static void row_positions_f4(const segments_t *g, int64_t r, float *xs, float *ys) {
    for (int64_t s = g->row_ptr[r]; s < g->row_ptr[r + 1]; s++) {
        const int64_t c0 = g->col[s], n = g->count[s];
        const float t0s = (float)g->t0[s], dxs = (float)g->dx[s], dys = (float)g->dy[s];
        const float x0s = (float)g->x0[s], y0s = (float)g->y0[s];
        for (int64_t j = 0; j < n; j++) {
            const float t = t0s + (float)j;
            const float px = dxs * t;
            const float py = dys * t;
            xs[c0 + j] = px + x0s;
            ys[c0 + j] = py + y0s;
        }
    }
}

/* floor(x) without libm's call (x86-64's baseline has no SSE4.1 round): exact below 2^52, where a double
 * still has a fraction; the rest (NaN included) as floor gives it. */
static inline double floor_f8(double x) {
    if (fabs(x) < 4503599627370496.0) {
        const double t = (double)(int64_t)x; /* truncated: exact in this range */
        return t > x ? t - 1.0 : t;
    }
    return floor(x);
}

/* Nearest on a line map of pixel centres: the source pixel containing each centre (GDAL floors x + 1e-10,
 * added to each segment's start in float64); fill off the source. One loop per item size (copied as
 * unsigned integers of that size). */
#define NEAREST(N, T)                                                                                            \
    static void nearest_##N(const T *src, int64_t h_s, int64_t w_s, T fill, const segments_t *g, T *out,        \
                            int64_t h, int64_t w) {                                                            \
        for (int64_t r = 0; r < h; r++) {                                                                      \
            for (int64_t s = g->row_ptr[r]; s < g->row_ptr[r + 1]; s++) {                                      \
                const int64_t c0 = g->col[s], n = g->count[s];                                                 \
                const double xs0 = g->x0[s] + 1e-10, ys0 = g->y0[s] + 1e-10;                                   \
                const double dxs = g->dx[s], dys = g->dy[s], t0s = g->t0[s];                                   \
                T *o = out + r * w + c0;                                                                       \
                for (int64_t j = 0; j < n; j++) {                                                              \
                    const double t = t0s + (double)j;                                                          \
                    const double px = dxs * t;                                                                 \
                    const double py = dys * t;                                                                 \
                    const double x = floor_f8(px + xs0);                                                       \
                    const double y = floor_f8(py + ys0);                                                       \
                    /* (NaN fails these tests too) */                                                          \
                    const int inside = x >= 0 && x < (double)w_s && y >= 0 && y < (double)h_s;                 \
                    o[j] = inside ? src[(int64_t)y * w_s + (int64_t)x] : fill;                                 \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

NEAREST(1, uint8_t)
NEAREST(2, uint16_t)
NEAREST(4, uint32_t)
NEAREST(8, uint64_t)

/* Nearest for sources of 1, 2, 4 or 8 bytes a pixel (-3 for any other size: the NumPy kernel takes it). */
int nearest_lines(const char *src, int64_t h_s, int64_t w_s, int64_t itemsize, const char *fill,
                  const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                  const double *x0, const double *dx, const double *y0, const double *dy, char *out, int64_t h,
                  int64_t w) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy};
    switch (itemsize) {
        case 1: nearest_1((const uint8_t *)src, h_s, w_s, *(const uint8_t *)fill, &g, (uint8_t *)out, h, w); break;
        case 2: {
            uint16_t f;
            memcpy(&f, fill, 2);
            nearest_2((const uint16_t *)src, h_s, w_s, f, &g, (uint16_t *)out, h, w);
            break;
        }
        case 4: {
            uint32_t f;
            memcpy(&f, fill, 4);
            nearest_4((const uint32_t *)src, h_s, w_s, f, &g, (uint32_t *)out, h, w);
            break;
        }
        case 8: {
            uint64_t f;
            memcpy(&f, fill, 8);
            nearest_8((const uint64_t *)src, h_s, w_s, f, &g, (uint64_t *)out, h, w);
            break;
        }
        default: return -3;
    }
    return 0;
}

/* floorf(x), with NaN and magnitudes past 2^63 taken to -2^63: such positions (a transform that failed)
 * land far off the source, whose taps then weigh nothing, as the NumPy kernels' int32 indices send them. */
static inline float floor_via_int64(float x) {
    if (fabsf(x) < 2147483648.0f) { /* floorf without libm's call (x86-64's baseline has no SSE4.1 round) */
        const float t = (float)(int32_t)x; /* truncated: exact in this range */
        return t > x ? t - 1.0f : t;
    }
    const float f = floorf(x);
    return fabsf(f) < 9.223372036854775808e18f ? f : -9.223372036854775808e18f;
}

/* One footprint's taps along one axis (common._footprint_taps in float32): k_max weights (0 past the
 * footprint) into w_out; returns the first source index, bounded. */
static inline int32_t footprint_axis_f4(float lo, float hi, int64_t k_max, float *w_out) {
    const float f = floor_via_int64(lo + EPS32);
    const float u = hi - f;
    const float a = lo - f;
    w_out[0] = (u < 1.0f ? u : 1.0f) - a;
    for (int64_t k = 1; k < k_max; k++) {
        const float wk = u - (float)k;
        w_out[k] = wk < 0.0f ? 0.0f : (wk > 1.0f ? 1.0f : wk);
    }
    double b = (double)f;
    b = b < -INDEX_BOUND ? -INDEX_BOUND : (b > INDEX_BOUND ? INDEX_BOUND : b);
    return (int32_t)b;
}

static inline float clip_f4(float v, int64_t n) { return v < 0.0f ? 0.0f : (v > (float)n ? (float)n : v); }

typedef struct {
    float xl, xh, yl, yh;
} box_t;

static inline box_t ordered_corners(const float *xa, const float *ya, const float *xb, const float *yb, int64_t c) {
    box_t b = {xa[c], xb[c + 1], ya[c], yb[c + 1]};
    if (b.xh < b.xl) { const float t = b.xl; b.xl = b.xh; b.xh = t; }
    if (b.yh < b.yl) { const float t = b.yl; b.yl = b.yh; b.yh = t; }
    return b;
}

static int alloc_rows(int64_t w, float **buf) {
    *buf = (float *)malloc(sizeof(float) * 4 * (size_t)(w + 1));
    return *buf == NULL ? -1 : 0;
}

/* The most taps any footprint of the map needs along y and along x, into reach[0], reach[1]. */
int average_reach(const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                  const double *x0, const double *dx, const double *y0, const double *dy, int64_t h, int64_t w,
                  int64_t *reach) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy};
    float *buf;
    if (alloc_rows(w, &buf)) return -1;
    float *xa = buf, *ya = buf + (w + 1), *xb = buf + 2 * (w + 1), *yb = buf + 3 * (w + 1);
    int64_t ky = 1, kx = 1;
    row_positions_f4(&g, 0, xa, ya);
    for (int64_t r = 0; r < h; r++) {
        row_positions_f4(&g, r + 1, xb, yb);
        for (int64_t c = 0; c < w; c++) {
            const box_t b = ordered_corners(xa, ya, xb, yb, c);
            const double ny_d = ceil((double)(b.yh - floor_via_int64(b.yl + EPS32)) - 1e-10);
            const double nx_d = ceil((double)(b.xh - floor_via_int64(b.xl + EPS32)) - 1e-10);
            if (!(ny_d < MAX_REACH && nx_d < MAX_REACH)) { /* NaN, inf or absurd corners: the NumPy kernel judges */
                free(buf);
                return -4;
            }
            const int64_t ny = (int64_t)ny_d, nx = (int64_t)nx_d;
            ky = ny > ky ? ny : ky;
            kx = nx > kx ? nx : kx;
        }
        float *t = xa; xa = xb; xb = t;
        t = ya; ya = yb; yb = t;
    }
    free(buf);
    reach[0] = ky;
    reach[1] = kx;
    return 0;
}

/* Every pixel's footprint taps: first (h, w, 2), wy (h, w, ky), wx (h, w, kx), overlap (h, w). */
int average_taps(const int64_t *row_ptr, const int64_t *col, const int64_t *count, const double *t0,
                 const double *x0, const double *dx, const double *y0, const double *dy, int64_t h, int64_t w,
                 int64_t src_h, int64_t src_w, int32_t *first, float *wy, int64_t ky, float *wx, int64_t kx,
                 float *overlap) {
    const segments_t g = {row_ptr, col, count, t0, x0, dx, y0, dy};
    float *buf;
    if (alloc_rows(w, &buf)) return -1;
    float *xa = buf, *ya = buf + (w + 1), *xb = buf + 2 * (w + 1), *yb = buf + 3 * (w + 1);
    row_positions_f4(&g, 0, xa, ya);
    for (int64_t r = 0; r < h; r++) {
        row_positions_f4(&g, r + 1, xb, yb);
        for (int64_t c = 0; c < w; c++) {
            const int64_t p = r * w + c;
            const box_t b = ordered_corners(xa, ya, xb, yb, c);
            first[2 * p] = footprint_axis_f4(b.yl, b.yh, ky, wy + p * ky);
            first[2 * p + 1] = footprint_axis_f4(b.xl, b.xh, kx, wx + p * kx);
            overlap[p] = (clip_f4(b.yh, src_h) - clip_f4(b.yl, src_h)) * (clip_f4(b.xh, src_w) - clip_f4(b.xl, src_w));
        }
        float *t = xa; xa = xb; xb = t;
        t = ya; ya = yb; yb = t;
    }
    free(buf);
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

/* Σ w·v / Σ w·valid over per-pixel taps (first, wy, wx) in float32, in the NumPy kernels' order (along x
 * for each tap row, times that row's weight, rows added in turn); taps off the source or without data add
 * nothing. Without nodata the weight sum is overlap. Then GDAL's rounding (half up for integers;
 * unsigned_convex: a cast truncates a non-negative mean, no clip), fill where no weight. One function per
 * source type. (A branch per tap, not a select: masks come in blobs, whose branches the core predicts.) */
#define WEIGHTED_SUMS(NAME, SUFFIX, T)                                                                           \
    int NAME(const T *src, int64_t h_s, int64_t w_s, int test_value, double nodata, int test_nan, int all_valid, \
             const int32_t *first, const float *wy, int64_t ny, const float *wx, int64_t nx,                   \
             const float *overlap, double fill_d, int unsigned_convex, float lo, float hi, T *out, int64_t h,  \
             int64_t w) {                                                                                      \
        const int integer = hi > lo;                                                                           \
        const T fill = (T)fill_d;                                                                              \
        for (int64_t p = 0; p < h * w; p++) {                                                                  \
            const int64_t iy0 = first[2 * p], ix0 = first[2 * p + 1];                                          \
            const float *wyp = wy + p * ny, *wxp = wx + p * nx;                                                \
            const int inside = iy0 >= 0 && iy0 + ny <= h_s && ix0 >= 0 && ix0 + nx <= w_s;                     \
            float acc = 0.0f, wsum = 0.0f;                                                                     \
            if (inside && all_valid) {                                                                         \
                for (int64_t ky = 0; ky < ny; ky++) {                                                          \
                    const T *s = src + (iy0 + ky) * w_s + ix0;                                                 \
                    float row = 0.0f;                                                                          \
                    for (int64_t kx = 0; kx < nx; kx++) {                                                      \
                        const float t = wxp[kx] * (float)s[kx];                                                \
                        row += t;                                                                              \
                    }                                                                                          \
                    const float t = row * wyp[ky];                                                             \
                    acc += t;                                                                                  \
                }                                                                                              \
                wsum = overlap[p];                                                                             \
            } else if (inside) {                                                                               \
                for (int64_t ky = 0; ky < ny; ky++) {                                                          \
                    const T *s = src + (iy0 + ky) * w_s + ix0;                                                 \
                    float row = 0.0f, vrow = 0.0f;                                                             \
                    for (int64_t kx = 0; kx < nx; kx++) {                                                      \
                        const T v = s[kx];                                                                     \
                        if (valid_##SUFFIX(v, test_value, nodata, test_nan)) {                                   \
                            const float t = wxp[kx] * (float)v;                                                \
                            row += t;                                                                          \
                            vrow += wxp[kx];                                                                   \
                        }                                                                                      \
                    }                                                                                          \
                    const float t = row * wyp[ky];                                                             \
                    acc += t;                                                                                  \
                    const float tv = vrow * wyp[ky];                                                           \
                    wsum += tv;                                                                                \
                }                                                                                              \
            } else {                                                                                           \
                for (int64_t ky = 0; ky < ny; ky++) {                                                          \
                    const int64_t iy = iy0 + ky;                                                               \
                    float row = 0.0f, vrow = 0.0f;                                                             \
                    if (iy >= 0 && iy < h_s) {                                                                 \
                        for (int64_t kx = 0; kx < nx; kx++) {                                                  \
                            const int64_t ix = ix0 + kx;                                                       \
                            if (ix >= 0 && ix < w_s) {                                                         \
                                const T v = src[iy * w_s + ix];                                                \
                                if (all_valid || valid_##SUFFIX(v, test_value, nodata, test_nan)) {              \
                                    const float t = wxp[kx] * (float)v;                                        \
                                    row += t;                                                                  \
                                    vrow += wxp[kx];                                                           \
                                }                                                                              \
                            }                                                                                  \
                        }                                                                                      \
                    }                                                                                          \
                    const float t = row * wyp[ky];                                                             \
                    acc += t;                                                                                  \
                    const float tv = vrow * wyp[ky];                                                           \
                    wsum += tv;                                                                                \
                }                                                                                              \
                if (all_valid) wsum = overlap[p];                                                              \
            }                                                                                                  \
            if (!(wsum > MIN_WEIGHT32)) {                                                                      \
                out[p] = fill;                                                                                 \
                continue;                                                                                      \
            }                                                                                                  \
            float value = acc / wsum;                                                                          \
            if (integer) {                                                                                     \
                value = value + HALF32;                                                                        \
                if (!unsigned_convex) {                                                                        \
                    value = floor_via_int64(value);                                                                     \
                    value = value < lo ? lo : value;                                                           \
                    value = value > hi ? hi : value;                                                           \
                }                                                                                              \
            }                                                                                                  \
            out[p] = (T)value;                                                                                 \
        }                                                                                                      \
        return 0;                                                                                              \
    }

#define KERNELS(SUFFIX, T) VALID(SUFFIX, T) WEIGHTED_SUMS(weighted_sums_##SUFFIX, SUFFIX, T)

KERNELS(u1, uint8_t)
KERNELS(i1, int8_t)
KERNELS(u2, uint16_t)
KERNELS(i2, int16_t)
KERNELS(f4, float)

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused",
                                    "The compiled kernels, called through ctypes (pipeline.resample.compiled).",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }

/* Fused row gather + RoPE turn for the fast transfer path (float32 arithmetic, one thread, plain loops that the
 * compiler vectorizes), and the bf16 ends of a map whose products run in bf16 beside a float32 cache: gathered rows
 * rounded to bf16 as they are written, and bf16 products widened (and turned) as they land in the cache. Built and loaded by heterofold_hub/transfer/kernels/__init__.py; the torch ops in
 * transfer/maps.py (Workspace) do the same work in several passes and remain the fallback.
 *
 * Turn tables follow plan.Turn: out = x * cos + swap(x) * sin, where swap exchanges the two halves of the
 * first `rotary` dims and the sign of rotate_half is already folded into sin; past `rotary`, x is copied.
 */
#include <stdint.h>
#include <string.h>

/* float32 -> bf16, round to nearest even (torch's rounding, bit for bit); a NaN stays a (quiet) NaN. */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float as_float32(float f) { return f; }

/* out[r, h, :] = turn(src[rows[r * heads + h], :]) for r < n, h < heads, each result stored by STORE into OUT_T.
 * src: [R, dim] rows; out: rows of stride out_stride elements, heads dim apart; cos/sin: [n, dim] or NULL (copy).
 * One body, two compiled functions below: float32 output, and bf16 (uint16 bits, each result rounded). */
#define GATHER_TURN(NAME, OUT_T, STORE)                                                                       \
    void NAME(const float *src, const int64_t *rows, int64_t n, int64_t heads, int64_t dim, OUT_T *out,       \
              int64_t out_stride, const float *cos, const float *sin, int64_t rotary) {                       \
        const int64_t half = rotary / 2;                                                                       \
        for (int64_t r = 0; r < n; ++r) {                                                                      \
            for (int64_t h = 0; h < heads; ++h) {                                                              \
                const float *restrict x = src + rows[r * heads + h] * dim;                                     \
                OUT_T *restrict y = out + r * out_stride + h * dim;                                            \
                if (cos == 0) {                                                                                \
                    for (int64_t d = 0; d < dim; ++d) y[d] = STORE(x[d]);                                      \
                    continue;                                                                                  \
                }                                                                                              \
                const float *restrict c = cos + r * dim, *restrict s = sin + r * dim;                          \
                for (int64_t d = 0; d < half; ++d) {                                                           \
                    y[d] = STORE(x[d] * c[d] + x[d + half] * s[d]);                                            \
                    y[d + half] = STORE(x[d + half] * c[d + half] + x[d] * s[d + half]);                       \
                }                                                                                              \
                for (int64_t d = rotary; d < dim; ++d) y[d] = STORE(x[d]);                                     \
            }                                                                                                  \
        }                                                                                                      \
    }

GATHER_TURN(hf_gather_turn, float, as_float32)
GATHER_TURN(hf_gather_turn_bf16, uint16_t, to_bf16)

/* x[r, h, :] = turn(x[r, h, :]) in place, for rows of stride row_stride floats, heads dim apart. */
void hf_turn(float *x, int64_t n, int64_t heads, int64_t dim, int64_t row_stride, const float *cos,
             const float *sin, int64_t rotary) {
    const int64_t half = rotary / 2;
    for (int64_t r = 0; r < n; ++r) {
        const float *restrict c = cos + r * dim, *restrict s = sin + r * dim;
        for (int64_t h = 0; h < heads; ++h) {
            float *restrict y = x + r * row_stride + h * dim;
            for (int64_t d = 0; d < half; ++d) {
                const float a = y[d], b = y[d + half];
                y[d] = a * c[d] + b * s[d];
                y[d + half] = b * c[d + half] + a * s[d + half];
            }
        }
    }
}

/* y[r, h, :] = turn(float(x[r, h, :])): bf16 rows x (contiguous, [n, heads, dim]) widened into float32 rows of
 * stride y_stride, turned when cos is not NULL (the same arithmetic as hf_turn on the widened rows). */
void hf_widen_turn(const uint16_t *x, int64_t n, int64_t heads, int64_t dim, float *out, int64_t out_stride,
                   const float *cos, const float *sin, int64_t rotary) {
    const int64_t half = cos == 0 ? 0 : rotary / 2, turned = 2 * half;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
            const uint16_t *restrict a = x + (r * heads + h) * dim;
            float *restrict y = out + r * out_stride + h * dim;
            if (half) {
                const float *restrict c = cos + r * dim, *restrict s = sin + r * dim;
                for (int64_t d = 0; d < half; ++d) {
                    const float p = from_bf16(a[d]), q = from_bf16(a[d + half]);
                    y[d] = p * c[d] + q * s[d];
                    y[d + half] = q * c[d + half] + p * s[d + half];
                }
            }
            for (int64_t d = turned; d < dim; ++d) y[d] = from_bf16(a[d]);
        }
    }
}

/* Fused row gather + RoPE turn for the fast transfer path (float32, one thread, plain loops that the
 * compiler vectorizes). Built and loaded by heterofold_hub/transfer/kernels/__init__.py; the torch ops in
 * transfer/maps.py (Workspace) do the same work in several passes and remain the fallback.
 *
 * Turn tables follow plan.Turn: out = x * cos + swap(x) * sin, where swap exchanges the two halves of the
 * first `rotary` dims and the sign of rotate_half is already folded into sin; past `rotary`, x is copied.
 */
#include <stdint.h>

/* out[r, h, :] = turn(src[rows[r * heads + h], :]) for r < n, h < heads.
 * src: [R, dim] rows; out: rows of stride out_stride floats, heads dim apart; cos/sin: [n, dim] or NULL (copy). */
void hf_gather_turn(const float *src, const int64_t *rows, int64_t n, int64_t heads, int64_t dim,
                    float *out, int64_t out_stride, const float *cos, const float *sin, int64_t rotary) {
    const int64_t half = rotary / 2;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
            const float *restrict x = src + rows[r * heads + h] * dim;
            float *restrict y = out + r * out_stride + h * dim;
            if (cos == 0) {
                for (int64_t d = 0; d < dim; ++d) y[d] = x[d];
                continue;
            }
            const float *restrict c = cos + r * dim, *restrict s = sin + r * dim;
            for (int64_t d = 0; d < half; ++d) {
                y[d] = x[d] * c[d] + x[d + half] * s[d];
                y[d + half] = x[d + half] * c[d + half] + x[d] * s[d + half];
            }
            for (int64_t d = rotary; d < dim; ++d) y[d] = x[d];
        }
    }
}

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

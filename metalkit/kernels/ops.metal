// Element-wise maps, broadcasts, norms, rope, routing, argmax and copies: the operations of
// engine/ml that read and write each value about once, so memory traffic decides their speed
// and each is one plain kernel. Arguments are in args_ops.h.
#include <metal_stdlib>
using namespace metal;

#include "args.h"

// ops_sum returns the sum of v over the threadgroup to every thread. partial holds one value
// per SIMD group (32 floats: up to 1024 threads); nsg is the number of SIMD groups.
static inline float ops_sum(float v, threadgroup float * partial, uint sgid, uint lane, uint nsg) {
    v = simd_sum(v);
    if (lane == 0) {
        partial[sgid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v = lane < nsg ? partial[lane] : 0.0f;
    v = simd_sum(v);
    // partial is reused by the next reduction.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return v;
}

// ops_max is ops_sum with max.
static inline float ops_max(float v, threadgroup float * partial, uint sgid, uint lane, uint nsg) {
    v = simd_max(v);
    if (lane == 0) {
        partial[sgid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v = lane < nsg ? partial[lane] : -INFINITY;
    v = simd_max(v);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return v;
}

// ops_better reports whether candidate (v, i) beats (bv, bi): larger, or equal with the
// lower index; bi < 0 is no candidate yet.
static inline bool ops_better(float v, int i, float bv, int bi) {
    if (i < 0) {
        return false;
    }
    return bi < 0 || v > bv || (v == bv && i < bi);
}

// ops_best reduces each thread's candidate (bv, bi) to the threadgroup's best, returned to
// every thread in bi (and bv). pv, pi hold one candidate per SIMD group.
static inline void ops_best(thread float & bv, thread int & bi, threadgroup float * pv, threadgroup int * pi,
                            uint sgid, uint lane, uint nsg) {
    for (ushort off = 16; off > 0; off >>= 1) {
        float v = simd_shuffle_xor(bv, off);
        int i = simd_shuffle_xor(bi, off);
        if (ops_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    if (lane == 0) {
        pv[sgid] = bv;
        pi[sgid] = bi;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    bv = -INFINITY;
    bi = -1;
    for (uint s = 0; s < nsg; s++) {
        if (ops_better(pv[s], pi[s], bv, bi)) {
            bv = pv[s];
            bi = pi[s];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

kernel void unary_f32(constant unary_f32_args & a [[buffer(0)]],
                      device const float * x [[buffer(1)]],
                      device float * y [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
    if ((int) i >= a.n) {
        return;
    }
    float v = x[i];
    switch (a.op) {
    case UNARY_SIGMOID:
        v = 1.0f / (1.0f + exp(-v));
        break;
    case UNARY_SILU:
        v = v / (1.0f + exp(-v));
        break;
    case UNARY_SOFTPLUS:
        // Above 20, log(1+e^x) is x in float32 (the CPU backend and ggml switch there too).
        v = v > 20.0f ? v : log(1.0f + exp(v));
        break;
    case UNARY_SCALE:
        v = v * a.scale;
        break;
    }
    y[i] = v;
}

// gelu_f16 is ml.GELU: the tanh approximation on x rounded to half, the result rounded to
// half (llama.cpp's CPU table), 0 below −10 and x above 10.
static inline float gelu_f16(float x) {
    if (x <= -10.0f) {
        return 0.0f;
    }
    if (x >= 10.0f) {
        return x;
    }
    const float h = float(half(x));
    const float t = 0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h);
    return float(half(0.5f * h * (1.0f + precise::tanh(t))));
}

kernel void binary_f32(constant binary_f32_args & a [[buffer(0)]],
                       device const float * x [[buffer(1)]],
                       device const float * z [[buffer(2)]],
                       device float * y [[buffer(3)]],
                       uint i [[thread_position_in_grid]]) {
    if ((int) i >= a.n) {
        return;
    }
    float u = x[i];
    float v = z[i];
    switch (a.op) {
    case BINARY_ADD:
        y[i] = u + v;
        break;
    case BINARY_MUL:
        y[i] = u * v;
        break;
    case BINARY_SWIGLU:
        y[i] = u / (1.0f + exp(-u)) * v;
        break;
    case BINARY_GEGLU:
        y[i] = gelu_f16(u) * v;
        break;
    case BINARY_CLAMPED_SWIGLU: {
        const float g = min(u, a.limit);
        const float w = clamp(v, -a.limit, a.limit);
        y[i] = g / (1.0f + exp(a.alpha * -g)) * (w + 1.0f);
        break;
    }
    }
}

kernel void bcast_f32(constant bcast_f32_args & a [[buffer(0)]],
                      device const float * x [[buffer(1)]],
                      device const float * w [[buffer(2)]],
                      device float * y [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
    if ((int) i >= a.n) {
        return;
    }
    float v = w[(int) i % a.d];
    y[i] = a.op == BINARY_ADD ? x[i] + v : x[i] * v;
}

kernel void rms_norm_f32(constant rms_norm_f32_args & a [[buffer(0)]],
                         device const float * x [[buffer(1)]],
                         device const float * w [[buffer(2)]],
                         device float * y [[buffer(3)]],
                         uint row [[threadgroup_position_in_grid]],
                         uint tid [[thread_position_in_threadgroup]],
                         uint ntg [[threads_per_threadgroup]],
                         uint sgid [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float partial[32];
    device const float * src = x + (ulong) row * a.d;
    device float * dst = y + (ulong) row * a.d;
    float sum = 0.0f;
    for (int j = tid; j < a.d; j += ntg) {
        sum += src[j] * src[j];
    }
    sum = ops_sum(sum, partial, sgid, lane, (ntg + 31) / 32);
    float s = 1.0f / sqrt(sum / (float) a.d + a.eps);
    // Each thread writes the elements it read: y may be x's buffer.
    for (int j = tid; j < a.d; j += ntg) {
        dst[j] = a.has_w ? src[j] * s * w[j] : src[j] * s;
    }
}

kernel void l2_norm_f32(constant l2_norm_f32_args & a [[buffer(0)]],
                        device const float * x [[buffer(1)]],
                        device float * y [[buffer(2)]],
                        uint row [[threadgroup_position_in_grid]],
                        uint tid [[thread_position_in_threadgroup]],
                        uint ntg [[threads_per_threadgroup]],
                        uint sgid [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float partial[32];
    device const float * src = x + (ulong) row * a.d;
    device float * dst = y + (ulong) row * a.d;
    float sum = 0.0f;
    for (int j = tid; j < a.d; j += ntg) {
        sum += src[j] * src[j];
    }
    sum = ops_sum(sum, partial, sgid, lane, (ntg + 31) / 32);
    float s = 1.0f / max(sqrt(sum), a.eps);
    for (int j = tid; j < a.d; j += ntg) {
        dst[j] = src[j] * s;
    }
}

kernel void rope_f32(constant rope_f32_args & a [[buffer(0)]],
                     device const float * x [[buffer(1)]],
                     device const float * table [[buffer(2)]],
                     device float * y [[buffer(3)]],
                     uint i [[thread_position_in_grid]]) {
    int total = a.n * a.heads * a.head_dim;
    if ((int) i >= total) {
        return;
    }
    int j = (int) i % a.head_dim;
    if (j >= a.dims) {
        y[i] = x[i];
        return;
    }
    int half_dims = a.dims / 2;
    int k;
    int other;
    if (a.neox) {
        if (j >= half_dims) {
            return; // rotated by the thread of its pair's first element
        }
        k = j;
        other = j + half_dims;
    } else {
        if (j & 1) {
            return;
        }
        k = j / 2;
        other = j + 1;
    }
    int t = (int) i / (a.heads * a.head_dim);
    float c = table[t * half_dims + k];
    float s = table[a.n * half_dims + t * half_dims + k];
    int base = (int) i - j;
    float x0 = x[base + j];
    float x1 = x[base + other];
    y[base + j] = x0 * c - x1 * s;
    y[base + other] = x0 * s + x1 * c;
}

kernel void route_f32(constant route_f32_args & a [[buffer(0)]],
                      device const float * logits [[buffer(1)]],
                      device float * ids [[buffer(2)]],
                      device float * weights [[buffer(3)]],
                      threadgroup float * p [[threadgroup(0)]],
                      uint row [[threadgroup_position_in_grid]],
                      uint tid [[thread_position_in_threadgroup]],
                      uint ntg [[threads_per_threadgroup]],
                      uint sgid [[simdgroup_index_in_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float partial[32];
    threadgroup float pv[32];
    threadgroup int pi[32];
    uint nsg = (ntg + 31) / 32;
    device const float * x = logits + (ulong) row * a.experts;
    // Softmax: exponentials after subtracting the maximum, then one scale.
    float m = -INFINITY;
    for (int e = tid; e < a.experts; e += ntg) {
        m = max(m, x[e]);
    }
    m = ops_max(m, partial, sgid, lane, nsg);
    float sum = 0.0f;
    for (int e = tid; e < a.experts; e += ntg) {
        float v = exp(x[e] - m);
        p[e] = v;
        sum += v;
    }
    sum = ops_sum(sum, partial, sgid, lane, nsg);
    float inv = 1.0f / sum;
    for (int e = tid; e < a.experts; e += ntg) {
        p[e] *= inv;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // k rounds of selection; a chosen expert is marked −1 (probabilities are ≥ 0). A NaN
    // probability (NaN or infinite logits) ranks below every number, so that a row of them
    // still chooses k distinct experts (k ≤ experts), with NaN weights, as the CPU does: a
    // round never ends without a choice, which would mark p[−1].
    float chosen = 0.0f;
    device float * id = ids + (ulong) row * a.k;
    device float * w = weights + (ulong) row * a.k;
    for (int j = 0; j < a.k; j++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int e = tid; e < a.experts; e += ntg) {
            float v = p[e];
            if (v == -1.0f) {
                continue;
            }
            if (isnan(v)) {
                v = -0.5f;
            }
            if (ops_better(v, e, bv, bi)) {
                bv = v;
                bi = e;
            }
        }
        ops_best(bv, bi, pv, pi, sgid, lane, nsg);
        if (tid == 0) {
            const float pb = p[bi];
            chosen += pb;
            id[j] = (float) bi;
            w[j] = pb;
            p[bi] = -1.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (a.norm && tid == 0) {
        float s = max(chosen, a.min_sum);
        for (int j = 0; j < a.k; j++) {
            w[j] /= s;
        }
    }
}

kernel void weighted_sum_f32(constant weighted_sum_f32_args & a [[buffer(0)]],
                             device const float * x [[buffer(1)]],
                             device const float * w [[buffer(2)]],
                             device float * y [[buffer(3)]],
                             uint i [[thread_position_in_grid]]) {
    if ((int) i >= a.n * a.d) {
        return;
    }
    int t = (int) i / a.d;
    int e = (int) i % a.d;
    float acc = 0.0f;
    // Slot order, each slot scaled then added, as the CPU backend and llama.cpp sum them.
    for (int j = 0; j < a.k; j++) {
        acc += x[((ulong) t * a.k + j) * a.d + e] * w[t * a.k + j];
    }
    y[i] = acc;
}

kernel void argmax_f32(constant argmax_f32_args & a [[buffer(0)]],
                       device const float * x [[buffer(1)]],
                       device float * ids [[buffer(2)]],
                       uint row [[threadgroup_position_in_grid]],
                       uint tid [[thread_position_in_threadgroup]],
                       uint ntg [[threads_per_threadgroup]],
                       uint sgid [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float pv[32];
    threadgroup int pi[32];
    device const float * src = x + (ulong) row * a.d;
    float bv = -INFINITY;
    int bi = -1;
    for (int j = tid; j < a.d; j += ntg) {
        if (ops_better(src[j], j, bv, bi)) {
            bv = src[j];
            bi = j;
        }
    }
    ops_best(bv, bi, pv, pi, sgid, lane, (ntg + 31) / 32);
    if (tid == 0) {
        ids[row] = (float) bi;
    }
}

kernel void copy_f32(constant copy_f32_args & a [[buffer(0)]],
                     device const float * x [[buffer(1)]],
                     device float * y [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
    if ((int) i >= a.rows * a.cols) {
        return;
    }
    int r = (int) i / a.cols;
    int c = (int) i % a.cols;
    y[(ulong) r * a.dst_stride + c] = x[(ulong) r * a.src_stride + c];
}

// Attention over a window, with or without sinks (metalkit/attention.go): gpt-oss's layers
// and gemma3's sliding-window layers.
#include <metal_stdlib>
using namespace metal;

#include "args_attn.h"
#include "kv_cache.h"

// One SIMD group per (query token, query head): the positions go by one at a time, the 32
// lanes share each score's dot product (head_dim/32 features a lane) and keep an online
// softmax; the sink, if any, joins the denominator at the end, as a score that weighs no value.
// Simple rather than fast: the first Metal form of SinkAttention, checked on the harness.
template <typename R>
static void attn_sinks(constant attn_sinks_args &a, device const float *q, device const typename R::elem *kc,
                       device const typename R::elem *vc, device const int32_t *table, device const float *sinks,
                       device float *out, uint2 tg, uint lane) {
    const int i = int(tg.x);
    const int h = int(tg.y);
    if (i >= a.n || h >= a.heads) {
        return;
    }
    const int hd = a.head_dim;
    const int per = hd / 32;
    const int g = h / (a.heads / a.kv_heads);
    const int stride = a.kv_heads * hd;
    device const float *qh = q + (ulong(i) * ulong(a.heads) + ulong(h)) * ulong(hd);
    float ql[ATTN_MAX_HEAD_DIM / 32];
    float acc[ATTN_MAX_HEAD_DIM / 32];
    for (int j = 0; j < per; j++) {
        ql[j] = qh[int(lane) * per + j];
        acc[j] = 0.0f;
    }
    const int m = a.pos0 + i + 1; // causal: positions 0 … pos0+i
    const int s0 = a.window > 0 ? max(0, m - a.window) : 0;
    float mx = ATTN_NO_SCORE;
    float l = 0.0f;
    for (int p = s0; p < m; p++) {
        const ulong row = ulong(table[p / a.block_size] * a.block_size + p % a.block_size) * ulong(stride) + ulong(g * hd) + ulong(int(lane) * per);
        float s = 0.0f;
        for (int j = 0; j < per; j++) {
            s += ql[j] * R::value(kc, row + ulong(j));
        }
        s = simd_sum(s) * a.scale;
        const float nm = max(mx, s);
        const float c = exp(mx - nm);
        const float e = exp(s - nm);
        l = l * c + e;
        for (int j = 0; j < per; j++) {
            acc[j] = acc[j] * c + e * R::value(vc, row + ulong(j));
        }
        mx = nm;
    }
    // Without sinks the window is never empty (it holds position pos0+i), so mx is a real
    // score and no −∞ sink has to stand in for "none".
    float c = 1.0f;
    if (a.has_sinks != 0) {
        const float sink = sinks[h];
        const float nm = max(mx, sink);
        c = exp(mx - nm);
        l = l * c + exp(sink - nm);
    }
    device float *o = out + (ulong(i) * ulong(a.heads) + ulong(h)) * ulong(hd) + ulong(int(lane) * per);
    for (int j = 0; j < per; j++) {
        o[j] = acc[j] * c / l;
    }
}

kernel void attn_sinks_f32(constant attn_sinks_args &a [[buffer(0)]],
                           device const float *q [[buffer(1)]],
                           device const float *kc [[buffer(2)]],
                           device const float *vc [[buffer(3)]],
                           device const int32_t *table [[buffer(4)]],
                           device const float *sinks [[buffer(5)]],
                           device float *out [[buffer(6)]],
                           uint2 tg [[threadgroup_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]]) {
    attn_sinks<kv_f32>(a, q, kc, vc, table, sinks, out, tg, lane);
}

kernel void attn_sinks_f16(constant attn_sinks_args &a [[buffer(0)]],
                           device const float *q [[buffer(1)]],
                           device const half *kc [[buffer(2)]],
                           device const half *vc [[buffer(3)]],
                           device const int32_t *table [[buffer(4)]],
                           device const float *sinks [[buffer(5)]],
                           device float *out [[buffer(6)]],
                           uint2 tg [[threadgroup_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]]) {
    attn_sinks<kv_f16>(a, q, kc, vc, table, sinks, out, tg, lane);
}

kernel void attn_sinks_q8_0(constant attn_sinks_args &a [[buffer(0)]],
                            device const float *q [[buffer(1)]],
                            device const uchar *kc [[buffer(2)]],
                            device const uchar *vc [[buffer(3)]],
                            device const int32_t *table [[buffer(4)]],
                            device const float *sinks [[buffer(5)]],
                            device float *out [[buffer(6)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
    attn_sinks<kv_q8_0>(a, q, kc, vc, table, sinks, out, tg, lane);
}

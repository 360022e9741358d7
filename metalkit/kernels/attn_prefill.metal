// Prefill attention (metalkit/attention.go): n query tokens at positions pos0 … pos0+n−1
// over the paged cache, causal, as flash attention does it: the positions go by in tiles of
// 32, one per SIMD group's lanes, with a running max and sum of exponentials per query and
// head and the output so far rescaled when the max grows, so no score matrix is stored.
#include <metal_stdlib>
using namespace metal;

#include "args_attn.h"
#include "kv_cache.h"

// One threadgroup per (ATTN_PREFILL_QUERIES query tokens, tg_heads query heads of one KV
// head), one SIMD group per token computing all tg_heads heads: as in grouped decode, each
// key and value element loaded serves every head of the group (tg_heads multiply-adds per
// load instead of one); tg_heads 1 is the per-query-head variant. Scores: lane j takes
// position p0+j of the tile (its row looked up in the block table, so tiles may cross cache
// blocks) and float4 dot products with the queries, staged in threadgroup memory. Values:
// lane j holds features j, j+32, … of every head's output and adds each position's value
// row with the weights the position's lane left in threadgroup memory.
template <typename R>
static void attn_prefill(constant attn_prefill_args &a, device const float4 *q,
                         device const typename R::elem *kc, device const typename R::elem *vc, device const int32_t *table,
                         device float *out, threadgroup float4 *sq, threadgroup float *sw, threadgroup int *srow,
                         uint2 tg, uint tid, uint lane, uint sg) {
    const int G = a.tg_heads;
    const int hd = a.head_dim;
    const int hd4 = hd / 4;
    const int h0 = int(tg.y) * G;
    const int g = h0 / a.group;
    const int t0 = int(tg.x) * ATTN_PREFILL_QUERIES;
    // sq[token][head][hd4]: the tg_heads heads of a token are contiguous in q.
    for (int i = int(tid); i < ATTN_PREFILL_QUERIES * G * hd4; i += ATTN_PREFILL_QUERIES * 32) {
        const int t = t0 + i / (G * hd4);
        sq[i] = t < a.n ? q[(ulong(t) * ulong(a.heads) + ulong(h0)) * ulong(hd4) + ulong(i % (G * hd4))] : float4(0.0f);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const int t = t0 + int(sg);
    if (t >= a.n) {
        return; // the whole SIMD group: no barrier follows
    }
    const int end = a.pos0 + t + 1; // causal: positions 0 … pos0+t
    const int stride = a.kv_heads * hd;
    const int nd = hd / 32;
    threadgroup const float4 *qt = sq + int(sg) * G * hd4;
    threadgroup float *tw = sw + int(sg) * ATTN_MAX_GROUP * 32;
    threadgroup int *trow = srow + int(sg) * 32;

    float o[ATTN_MAX_GROUP][ATTN_MAX_HEAD_DIM / 32];
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP];
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        for (int j = 0; j < ATTN_MAX_HEAD_DIM / 32; j++) {
            o[h][j] = 0.0f;
        }
        m[h] = ATTN_NO_SCORE;
        l[h] = 0.0f;
    }
    for (int p0 = 0; p0 < end; p0 += 32) {
        const int p = p0 + int(lane);
        const bool ok = p < end;
        const int row = ok ? table[p / a.block_size] * a.block_size + p % a.block_size : 0;
        float s[ATTN_MAX_GROUP];
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            s[h] = 0.0f;
        }
        if (ok) {
            const ulong k = ulong(row) * ulong(stride) + ulong(g * hd);
            for (int d = 0; d < hd4; d++) {
                const float4 kv = R::key4(kc, k + ulong(4 * d));
                for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                    if (h < G) {
                        s[h] += dot(kv, qt[h * hd4 + d]);
                    }
                }
            }
        }
        // Lane 0 always sees a position, so each new max is a real score (and the first
        // tile's correction exp(ATTN_NO_SCORE − max) is 0).
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                const float sh = ok ? s[h] * a.scale : ATTN_NO_SCORE;
                const float mn = max(m[h], simd_max(sh));
                const float corr = exp(m[h] - mn);
                const float w = ok ? exp(sh - mn) : 0.0f;
                l[h] = l[h] * corr + simd_sum(w);
                for (int j = 0; j < ATTN_MAX_HEAD_DIM / 32; j++) {
                    o[h][j] *= corr;
                }
                m[h] = mn;
                tw[h * 32 + int(lane)] = w;
            }
        }
        // The tile's weights and rows go through the SIMD group's own threadgroup slots:
        // two SIMD-group barriers instead of shuffles per position.
        trow[lane] = row;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        const int cnt = min(32, end - p0);
        for (int jj = 0; jj < cnt; jj++) {
            const ulong vr = ulong(trow[jj]) * ulong(stride) + ulong(g * hd);
            for (int j = 0; j < ATTN_MAX_HEAD_DIM / 32; j++) {
                if (j < nd) {
                    const float x = R::value(vc, vr + ulong(int(lane) + 32 * j));
                    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                        if (h < G) {
                            o[h][j] += tw[h * 32 + jj] * x;
                        }
                    }
                }
            }
        }
        simdgroup_barrier(mem_flags::mem_threadgroup); // before the next tile overwrites tw
    }
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        if (h < G) {
            device float *dst = out + (ulong(t) * ulong(a.heads) + ulong(h0 + h)) * ulong(hd);
            for (int j = 0; j < ATTN_MAX_HEAD_DIM / 32; j++) {
                if (j < nd) {
                    dst[int(lane) + 32 * j] = o[h][j] / l[h];
                }
            }
        }
    }
}

kernel void attn_prefill_f32(constant attn_prefill_args &a [[buffer(0)]],
                             device const float4 *q [[buffer(1)]],
                             device const float *kc [[buffer(2)]],
                             device const float *vc [[buffer(3)]],
                             device const int32_t *table [[buffer(4)]],
                             device float *out [[buffer(5)]],
                             threadgroup float4 *sq [[threadgroup(0)]],
                             uint2 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sw[ATTN_PREFILL_QUERIES * ATTN_MAX_GROUP * 32];
    threadgroup int srow[ATTN_PREFILL_QUERIES * 32];
    attn_prefill<kv_f32>(a, q, kc, vc, table, out, sq, sw, srow, tg, tid, lane, sg);
}

kernel void attn_prefill_f16(constant attn_prefill_args &a [[buffer(0)]],
                             device const float4 *q [[buffer(1)]],
                             device const half *kc [[buffer(2)]],
                             device const half *vc [[buffer(3)]],
                             device const int32_t *table [[buffer(4)]],
                             device float *out [[buffer(5)]],
                             threadgroup float4 *sq [[threadgroup(0)]],
                             uint2 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sw[ATTN_PREFILL_QUERIES * ATTN_MAX_GROUP * 32];
    threadgroup int srow[ATTN_PREFILL_QUERIES * 32];
    attn_prefill<kv_f16>(a, q, kc, vc, table, out, sq, sw, srow, tg, tid, lane, sg);
}

kernel void attn_prefill_q8_0(constant attn_prefill_args &a [[buffer(0)]],
                              device const float4 *q [[buffer(1)]],
                              device const uchar *kc [[buffer(2)]],
                              device const uchar *vc [[buffer(3)]],
                              device const int32_t *table [[buffer(4)]],
                              device float *out [[buffer(5)]],
                              threadgroup float4 *sq [[threadgroup(0)]],
                              uint2 tg [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]]) {
     threadgroup float sw[ATTN_PREFILL_QUERIES * ATTN_MAX_GROUP * 32];
     threadgroup int srow[ATTN_PREFILL_QUERIES * 32];
    attn_prefill<kv_q8_0>(a, q, kc, vc, table, out, sq, sw, srow, tg, tid, lane, sg);
}

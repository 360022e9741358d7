// The KV cache and decode attention (metalkit/cache.go, attention.go).
//
// A layer's keys (and values) are blocks of block_size positions, each position a row of
// kv_heads·head_dim values in the cache's type; a sequence's block table maps its block i
// to a block of the pool. Position p lives in row table[p / block_size]·block_size +
// p % block_size.
#include <metal_stdlib>
using namespace metal;

#include "args_attn.h"
#include "kv_cache.h"

// T is int32_t for a cache's own table, float for the tables of a batch (a pass input:
// block numbers as float32 values, exact below 2^24, as the engine holds ids).
template <typename T>
static inline int kv_row(device const T *table, int p, int block_size) {
    return int(table[p / block_size]) * block_size + p % block_size;
}

// ---- store and load --------------------------------------------------------------------

// One thread per value: k and v [n, row] float32 into the cache's rows of pos0 … pos0+n−1,
// converted to the cache's type (half rounds to nearest even, as the CPU's F32ToF16).
template <typename T>
static void kv_store(constant kv_store_args &a, device const float *k, device const float *v,
                     device T *kc, device T *vc, device const int32_t *table, uint i) {
    const uint total = uint(a.n) * uint(a.row);
    if (i >= total) {
        return;
    }
    const int t = int(i / uint(a.row));
    const int e = int(i % uint(a.row));
    const ulong dst = ulong(kv_row(table, a.pos0 + t, a.block_size)) * ulong(a.row) + ulong(e);
    kc[dst] = T(k[i]);
    vc[dst] = T(v[i]);
}

kernel void kv_store_f32(constant kv_store_args &a [[buffer(0)]],
                         device const float *k [[buffer(1)]],
                         device const float *v [[buffer(2)]],
                         device float *kc [[buffer(3)]],
                         device float *vc [[buffer(4)]],
                         device const int32_t *table [[buffer(5)]],
                         uint i [[thread_position_in_grid]]) {
    kv_store<float>(a, k, v, kc, vc, table, i);
}

kernel void kv_store_f16(constant kv_store_args &a [[buffer(0)]],
                         device const float *k [[buffer(1)]],
                         device const float *v [[buffer(2)]],
                         device half *kc [[buffer(3)]],
                         device half *vc [[buffer(4)]],
                         device const int32_t *table [[buffer(5)]],
                         uint i [[thread_position_in_grid]]) {
    kv_store<half>(a, k, v, kc, vc, table, i);
}

template <typename T>
static void kv_load(constant kv_load_args &a, device const T *kc, device const T *vc,
                    device const int32_t *table, device float *k, device float *v, uint i) {
    const uint total = uint(a.n) * uint(a.row);
    if (i >= total) {
        return;
    }
    const int t = int(i / uint(a.row));
    const int e = int(i % uint(a.row));
    const ulong src = ulong(kv_row(table, a.pos0 + t, a.block_size)) * ulong(a.row) + ulong(e);
    k[i] = float(kc[src]);
    v[i] = float(vc[src]);
}

kernel void kv_load_f32(constant kv_load_args &a [[buffer(0)]],
                        device const float *kc [[buffer(1)]],
                        device const float *vc [[buffer(2)]],
                        device const int32_t *table [[buffer(3)]],
                        device float *k [[buffer(4)]],
                        device float *v [[buffer(5)]],
                        uint i [[thread_position_in_grid]]) {
    kv_load<float>(a, kc, vc, table, k, v, i);
}

kernel void kv_load_f16(constant kv_load_args &a [[buffer(0)]],
                        device const half *kc [[buffer(1)]],
                        device const half *vc [[buffer(2)]],
                        device const int32_t *table [[buffer(3)]],
                        device float *k [[buffer(4)]],
                        device float *v [[buffer(5)]],
                        uint i [[thread_position_in_grid]]) {
    kv_load<half>(a, kc, vc, table, k, v, i);
}

// ---- q8_0 rows ---------------------------------------------------------------------------
//
// A q8_0 cache stores each head as ggml's Q8_0 blocks (a half scale, 32 int8) of the head
// rotated as ml.KVRotations says, as the CPU's cache does (engine/cpu/cache.go): the same
// operations in the same order, so the blocks are the CPU's bit for bit. One thread per
// position and KV head; the head goes through thread memory (at most ATTN_MAX_HEAD_DIM).

// hadamard_runs applies the orthonormal Walsh–Hadamard transform of size n (0: none) to
// each run of n of the len values of x, as the CPU's hadamardRows: butterflies, then s.
static void hadamard_runs(thread float *x, int len, int n, float s) {
    if (n == 0) {
        return;
    }
    for (int r = 0; r + n <= len; r += n) {
        thread float *v = x + r;
        for (int h = 1; h < n; h *= 2) {
            for (int i = 0; i < n; i += 2 * h) {
                for (int j = i; j < i + h; j++) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
            }
        }
        for (int i = 0; i < n; i++) {
            v[i] *= s;
        }
    }
}

// q8_0_put quantizes len values of x into blocks at dst, as quant.QuantizeQ8_0Ref.
static void q8_0_put(thread const float *x, int len, device uchar *dst) {
    for (int b = 0; b < len / 32; b++) {
        thread const float *blk = x + 32 * b;
        device uchar *o = dst + 34 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) {
            amax = max(amax, fabs(blk[j]));
        }
        const float d = amax / 127;
        const float id = d != 0 ? 1 / d : 0;
        *(device half *)o = half(d);
        device int8_t *q = (device int8_t *)(o + 2);
        for (int j = 0; j < 32; j++) {
            q[j] = int8_t(round(blk[j] * id));
        }
    }
}

// q8_0_get expands len values of blocks at src into x, as ggml's to_float.
static void q8_0_get(device const uchar *src, int len, thread float *x) {
    for (int b = 0; b < len / 32; b++) {
        device const uchar *o = src + 34 * b;
        const float d = float(*(device const half *)o);
        device const int8_t *q = (device const int8_t *)(o + 2);
        for (int j = 0; j < 32; j++) {
            x[32 * b + j] = float(q[j]) * d;
        }
    }
}

// q8_0_round rounds len values of x through Q8_0 blocks (quantized as q8_0_put, then
// expanded as q8_0_get), as the CPU's roundQ8_0.
static void q8_0_round(thread float *x, int len) {
    for (int b = 0; b < len / 32; b++) {
        thread float *blk = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) {
            amax = max(amax, fabs(blk[j]));
        }
        const float d = amax / 127;
        const float id = d != 0 ? 1 / d : 0;
        const float dh = float(half(d));
        for (int j = 0; j < 32; j++) {
            blk[j] = float(int8_t(round(blk[j] * id))) * dh;
        }
    }
}

// The byte offset of head h of position p in a q8_0 layer.
static inline ulong kv_q8_0_at(int row, int p, int hd, int h) {
    return (ulong(p) * ulong(row) + ulong(h) * ulong(hd)) / 32 * 34;
}

kernel void kv_store_q8_0(constant kv_store_args &a [[buffer(0)]],
                          device const float *k [[buffer(1)]],
                          device const float *v [[buffer(2)]],
                          device uchar *kc [[buffer(3)]],
                          device uchar *vc [[buffer(4)]],
                          device const int32_t *table [[buffer(5)]],
                          uint i [[thread_position_in_grid]]) {
    const int hd = a.head_dim, heads = a.row / hd;
    if (i >= uint(a.n) * uint(heads)) {
        return;
    }
    const int t = int(i) / heads, h = int(i) % heads;
    const ulong src = ulong(t) * ulong(a.row) + ulong(h) * ulong(hd);
    const ulong dst = kv_q8_0_at(a.row, kv_row(table, a.pos0 + t, a.block_size), hd, h);
    float x[ATTN_MAX_HEAD_DIM];
    for (int e = 0; e < hd; e++) {
        x[e] = k[src + e];
    }
    hadamard_runs(x, hd, a.rot_k, a.scale_k);
    q8_0_put(x, hd, kc + dst);
    for (int e = 0; e < hd; e++) {
        x[e] = v[src + e];
    }
    hadamard_runs(x, hd, a.rot_v, a.scale_v);
    q8_0_put(x, hd, vc + dst);
}

// kv_load_q8_0 expands and rotates back (the rotation is its own inverse), as the CPU's
// LoadKV: a snapshot of a q8_0 cache holds the values it stood for.
kernel void kv_load_q8_0(constant kv_load_args &a [[buffer(0)]],
                         device const uchar *kc [[buffer(1)]],
                         device const uchar *vc [[buffer(2)]],
                         device const int32_t *table [[buffer(3)]],
                         device float *k [[buffer(4)]],
                         device float *v [[buffer(5)]],
                         uint i [[thread_position_in_grid]]) {
    const int hd = a.head_dim, heads = a.row / hd;
    if (i >= uint(a.n) * uint(heads)) {
        return;
    }
    const int t = int(i) / heads, h = int(i) % heads;
    const ulong dst = ulong(t) * ulong(a.row) + ulong(h) * ulong(hd);
    const ulong src = kv_q8_0_at(a.row, kv_row(table, a.pos0 + t, a.block_size), hd, h);
    float x[ATTN_MAX_HEAD_DIM];
    q8_0_get(kc + src, hd, x);
    hadamard_runs(x, hd, a.rot_k, a.scale_k);
    for (int e = 0; e < hd; e++) {
        k[dst + e] = x[e];
    }
    q8_0_get(vc + src, hd, x);
    hadamard_runs(x, hd, a.rot_v, a.scale_v);
    for (int e = 0; e < hd; e++) {
        v[dst + e] = x[e];
    }
}

// A q8_0 cache's queries (rotated as the keys, then rounded to q8_0: they meet the keys as
// q8_0 blocks, as in llama.cpp) and its attention output (rotated back from the values'
// rotation). One thread per row of len values (at most ATTN_MAX_HEAD_DIM).
kernel void kv_q8_0_rows(constant kv_rows_args &a [[buffer(0)]],
                         device const float *x [[buffer(1)]],
                         device float *y [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
    if (i >= uint(a.rows)) {
        return;
    }
    const ulong o = ulong(i) * ulong(a.len);
    float r[ATTN_MAX_HEAD_DIM];
    for (int e = 0; e < a.len; e++) {
        r[e] = x[o + e];
    }
    hadamard_runs(r, a.len, a.rot, a.scale);
    if (a.round != 0) {
        q8_0_round(r, a.len);
    }
    for (int e = 0; e < a.len; e++) {
        y[o + e] = r[e];
    }
}

// ---- decode: split-K ---------------------------------------------------------------------
//
// One threadgroup per (split of positions, KV head) computes every query head sharing that
// KV head (Red Lite's grouped split-K: the group's heads read each K and V row once instead
// of once per head), or per (split, query head) when tg_heads is 1. Scores: one thread per
// position, float4 key loads, one accumulator per head. Values: one thread per feature, one
// accumulator per head. The split's rows are contiguous because a split never crosses a
// cache block (the host chooses the split so). With one split the output is normalised
// here; otherwise each split leaves its max, sum of exponentials and unnormalised
// accumulator for attn_merge_f32.
template <typename R, typename T>
static void attn_decode(constant attn_decode_args &a, const int positions, const int nsplit,
                        device const float4 *q, device const typename R::elem *kc, device const typename R::elem *vc,
                        device const T *table,
                        device float *pacc, device float *pml, device float *out,
                        threadgroup float4 *sq, threadgroup float *sp, threadgroup float *sred,
                        uint2 tg, uint tid, uint lane, uint sg) {
    const int G = a.tg_heads;
    const int hd = a.head_dim;
    const int hd4 = hd / 4;
    int h0, g;
    if (G == 1) {
        h0 = int(tg.y);
        g = h0 / a.group;
    } else {
        g = int(tg.y);
        h0 = g * a.group;
    }
    for (int i = int(tid); i < G * hd4; i += ATTN_DECODE_THREADS) {
        sq[i] = q[h0 * hd4 + i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const int split = int(tg.x);
    const int p0 = split * a.split;
    const int len = min(a.split, positions - p0);
    const int row0 = kv_row(table, p0, a.block_size);
    const int stride = a.kv_heads * hd;
    const bool ok = int(tid) < len;

    float s[ATTN_MAX_GROUP];
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        s[h] = 0.0f;
    }
    if (ok) {
        const ulong k = ulong(row0 + int(tid)) * ulong(stride) + ulong(g * hd);
        for (int d = 0; d < hd4; d++) {
            const float4 kv = R::key4(kc, k + ulong(4 * d));
            for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                if (h < G) {
                    s[h] += dot(kv, sq[h * hd4 + d]);
                }
            }
        }
    }

    // Per head: the split's max, then exp(s − max) and their sum, reduced across the
    // threadgroup's SIMD groups through sred.
    const int nsg = ATTN_DECODE_THREADS / 32;
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP];
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        if (h < G) {
            s[h] = ok ? s[h] * a.scale : ATTN_NO_SCORE;
            const float mx = simd_max(s[h]);
            if (lane == 0) {
                sred[int(sg) * ATTN_MAX_GROUP + h] = mx;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        if (h < G) {
            float mx = sred[h];
            for (int i = 1; i < nsg; i++) {
                mx = max(mx, sred[i * ATTN_MAX_GROUP + h]);
            }
            m[h] = mx;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        if (h < G) {
            const float p = ok ? exp(s[h] - m[h]) : 0.0f;
            sp[h * ATTN_DECODE_THREADS + int(tid)] = p;
            const float sum = simd_sum(p);
            if (lane == 0) {
                sred[int(sg) * ATTN_MAX_GROUP + h] = sum;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        if (h < G) {
            float sum = 0.0f;
            for (int i = 0; i < nsg; i++) {
                sum += sred[i * ATTN_MAX_GROUP + h];
            }
            l[h] = sum;
        }
    }

    for (int d = int(tid); d < hd; d += ATTN_DECODE_THREADS) {
        float acc[ATTN_MAX_GROUP];
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            acc[h] = 0.0f;
        }
        const ulong vp = ulong(row0) * ulong(stride) + ulong(g * hd + d);
        for (int j = 0; j < len; j++) {
            const float x = R::value(vc, vp + ulong(j) * ulong(stride));
            for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                if (h < G) {
                    acc[h] += sp[h * ATTN_DECODE_THREADS + j] * x;
                }
            }
        }
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                if (nsplit == 1) {
                    out[(h0 + h) * hd + d] = acc[h] / l[h];
                } else {
                    pacc[(ulong(split) * ulong(a.heads) + ulong(h0 + h)) * ulong(hd) + ulong(d)] = acc[h];
                }
            }
        }
    }
    if (nsplit > 1 && tid == 0) {
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                const ulong at = (ulong(split) * ulong(a.heads) + ulong(h0 + h)) * 2;
                pml[at] = m[h];
                pml[at + 1] = l[h];
            }
        }
    }
}

kernel void attn_decode_f32(constant attn_decode_args &a [[buffer(0)]],
                            device const float4 *q [[buffer(1)]],
                            device const float *kc [[buffer(2)]],
                            device const float *vc [[buffer(3)]],
                            device const int32_t *table [[buffer(4)]],
                            device float *pacc [[buffer(5)]],
                            device float *pml [[buffer(6)]],
                            device float *out [[buffer(7)]],
                            threadgroup float4 *sq [[threadgroup(0)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
    threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode<kv_f32, int32_t>(a, a.positions, a.nsplit, q, kc, vc, table, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

kernel void attn_decode_f16(constant attn_decode_args &a [[buffer(0)]],
                            device const float4 *q [[buffer(1)]],
                            device const half *kc [[buffer(2)]],
                            device const half *vc [[buffer(3)]],
                            device const int32_t *table [[buffer(4)]],
                            device float *pacc [[buffer(5)]],
                            device float *pml [[buffer(6)]],
                            device float *out [[buffer(7)]],
                            threadgroup float4 *sq [[threadgroup(0)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
    threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode<kv_f16, int32_t>(a, a.positions, a.nsplit, q, kc, vc, table, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

kernel void attn_decode_q8_0(constant attn_decode_args &a [[buffer(0)]],
                             device const float4 *q [[buffer(1)]],
                             device const uchar *kc [[buffer(2)]],
                             device const uchar *vc [[buffer(3)]],
                             device const int32_t *table [[buffer(4)]],
                             device float *pacc [[buffer(5)]],
                             device float *pml [[buffer(6)]],
                             device float *out [[buffer(7)]],
                             threadgroup float4 *sq [[threadgroup(0)]],
                             uint2 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]]) {
     threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
     threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode<kv_q8_0, int32_t>(a, a.positions, a.nsplit, q, kc, vc, table, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

// One threadgroup per query head h: out = Σ_s e^(m_s − M)·acc_s / Σ_s e^(m_s − M)·l_s with M
// the largest split max. Every split saw at least one position, so every m_s is finite.
static void attn_merge(const int heads, const int head_dim, const int nsplit,
                       device const float *pacc, device const float *pml, device float *out,
                       uint h, uint tid) {
    float M = ATTN_NO_SCORE;
    for (int s = 0; s < nsplit; s++) {
        M = max(M, pml[(ulong(s) * ulong(heads) + h) * 2]);
    }
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        const ulong at = (ulong(s) * ulong(heads) + h) * 2;
        L += pml[at + 1] * exp(pml[at] - M);
    }
    for (int d = int(tid); d < head_dim; d += ATTN_DECODE_THREADS) {
        float o = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            const ulong at = ulong(s) * ulong(heads) + h;
            o += pacc[at * ulong(head_dim) + ulong(d)] * exp(pml[at * 2] - M);
        }
        out[ulong(h) * ulong(head_dim) + ulong(d)] = o / L;
    }
}

kernel void attn_merge_f32(constant attn_merge_args &a [[buffer(0)]],
                           device const float *pacc [[buffer(1)]],
                           device const float *pml [[buffer(2)]],
                           device float *out [[buffer(3)]],
                           uint h [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]]) {
    attn_merge(a.heads, a.head_dim, a.nsplit, pacc, pml, out, h, tid);
}

// ---- decode of a batch: every sequence of a step in one dispatch ----------------------------
//
// The sequences of a step, each one query token over its own block table, as one grid:
// threadgroup x runs split x of the batch's splits (sequence s owns splits
// split0[s] … split0[s+1]−1), y as in attn_decode. Each sequence's partials are its splits'
// rows of pacc and pml; a sequence of one split writes its output itself, the others are
// merged by attn_merge_batch_f32 over a (query head, sequence) grid. The arithmetic is
// attn_decode's and attn_merge's, so the outputs are the per-sequence kernels' bit for bit.

// attn_batch_seq is the sequence whose splits hold batch split x: the last s with
// split0[s] ≤ x.
static inline int attn_batch_seq(constant attn_decode_batch_args &a, int x) {
    int lo = 0, hi = a.seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (a.split0[mid] <= x) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

template <typename R>
static void attn_decode_batch(constant attn_decode_batch_args &a, device const float4 *q,
                              device const typename R::elem *kc, device const typename R::elem *vc, device const float *tables,
                              device float *pacc, device float *pml, device float *out,
                              threadgroup float4 *sq, threadgroup float *sp, threadgroup float *sred,
                              uint2 tg, uint tid, uint lane, uint sg) {
    const int s = attn_batch_seq(a, int(tg.x));
    const int positions = a.positions[s];
    const int nsplit = (positions + a.d.split - 1) / a.d.split;
    const ulong part = ulong(a.split0[s]) * ulong(a.d.heads);
    attn_decode<R, float>(a.d, positions, nsplit, q + a.q_off[s], kc, vc, tables + a.table0[s],
                              pacc + part * ulong(a.d.head_dim), pml + part * 2, out + a.out_off[s],
                              sq, sp, sred, uint2(tg.x - uint(a.split0[s]), tg.y), tid, lane, sg);
}

kernel void attn_decode_batch_f32(constant attn_decode_batch_args &a [[buffer(0)]],
                                  device const float4 *q [[buffer(1)]],
                                  device const float *kc [[buffer(2)]],
                                  device const float *vc [[buffer(3)]],
                                  device const float *tables [[buffer(4)]],
                                  device float *pacc [[buffer(5)]],
                                  device float *pml [[buffer(6)]],
                                  device float *out [[buffer(7)]],
                                  threadgroup float4 *sq [[threadgroup(0)]],
                                  uint2 tg [[threadgroup_position_in_grid]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
    threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode_batch<kv_f32>(a, q, kc, vc, tables, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

kernel void attn_decode_batch_f16(constant attn_decode_batch_args &a [[buffer(0)]],
                                  device const float4 *q [[buffer(1)]],
                                  device const half *kc [[buffer(2)]],
                                  device const half *vc [[buffer(3)]],
                                  device const float *tables [[buffer(4)]],
                                  device float *pacc [[buffer(5)]],
                                  device float *pml [[buffer(6)]],
                                  device float *out [[buffer(7)]],
                                  threadgroup float4 *sq [[threadgroup(0)]],
                                  uint2 tg [[threadgroup_position_in_grid]],
                                  uint tid [[thread_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
    threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode_batch<kv_f16>(a, q, kc, vc, tables, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

kernel void attn_decode_batch_q8_0(constant attn_decode_batch_args &a [[buffer(0)]],
                                   device const float4 *q [[buffer(1)]],
                                   device const uchar *kc [[buffer(2)]],
                                   device const uchar *vc [[buffer(3)]],
                                   device const float *tables [[buffer(4)]],
                                   device float *pacc [[buffer(5)]],
                                   device float *pml [[buffer(6)]],
                                   device float *out [[buffer(7)]],
                                   threadgroup float4 *sq [[threadgroup(0)]],
                                   uint2 tg [[threadgroup_position_in_grid]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint lane [[thread_index_in_simdgroup]],
                                   uint sg [[simdgroup_index_in_threadgroup]]) {
     threadgroup float sp[ATTN_MAX_GROUP * ATTN_DECODE_THREADS];
     threadgroup float sred[(ATTN_DECODE_THREADS / 32) * ATTN_MAX_GROUP];
    attn_decode_batch<kv_q8_0>(a, q, kc, vc, tables, pacc, pml, out, sq, sp, sred, tg, tid, lane, sg);
}

// Threadgroup (h, s): query head h of sequence s, when s has more than one split.
kernel void attn_merge_batch_f32(constant attn_decode_batch_args &a [[buffer(0)]],
                                 device const float *pacc [[buffer(1)]],
                                 device const float *pml [[buffer(2)]],
                                 device float *out [[buffer(3)]],
                                 uint2 tg [[threadgroup_position_in_grid]],
                                 uint tid [[thread_index_in_threadgroup]]) {
    const int s = int(tg.y);
    const int nsplit = (a.positions[s] + a.d.split - 1) / a.d.split;
    if (nsplit == 1) {
        return;
    }
    const ulong part = ulong(a.split0[s]) * ulong(a.d.heads);
    attn_merge(a.d.heads, a.d.head_dim, nsplit, pacc + part * ulong(a.d.head_dim), pml + part * 2,
               out + a.out_off[s], tg.x, tid);
}

// mul_mat.h: the bodies of the matrix kernels, templates over a weight format of quant_blocks.h; the
// entry points (mul_mat.metal, get_rows.metal) are generated, one per format.
//
// Tensors: w is a [rows, cols] matrix in GGUF layout (row after row, row_bytes each); x is
// float32 [n, cols]; y is float32 [n, rows] (token-major, as engine/ml's MatMul returns it).
#pragma once

#include "args_matmul.h"
#include "quant_blocks.h"
#include "mul_mat_geometry.h" // MV_*, MM_*, GET_ROWS_THREADS: kernels/matmul.go

// ---- mat-vec (decode: n small)
//
// A row is split among `lanes` lanes of a SIMD group (a power of two chosen by the host: one
// lane per MV_SPAN chunks of 16 values, up to 32), so a SIMD group computes 32/lanes rows and
// no lane idles on short rows. A lane decodes MV_SPAN consecutive chunks before moving on by
// lanes spans: for the 2048-column gate/up rows that is 16 lanes, at most 2 per 256-value
// block (Red Lite measured 16 lanes faster than 32 and 8 on those rows). Each threadgroup
// takes MV_TOKENS tokens, so a weight is decoded once per MV_TOKENS tokens.

// mul_mv_rows dots `row` (a row of w) with nt tokens of x (stride cols), leaving each token's
// partial sum in acc; the lanes of the row are lane j of `lanes`.
template <typename F>
static inline void mul_mv_row(device const uchar * wr, int cols, device const float * x, int nt,
                              int lanes, int j, thread float * acc) {
    const int nch = (cols + 15) / 16;
    for (int s = j * MV_SPAN; s < nch; s += lanes * MV_SPAN) {
        const int end = min(nch, s + MV_SPAN);
        for (int c = s; c < end; c++) {
            float v[16];
            F::deq16(wr, c, cols, v);
            const int m = min(16, cols - 16 * c);
            for (int t = 0; t < nt; t++) {
                device const float * xp = x + (uint64_t)t * cols + 16 * c;
                float sum = 0.0f;
                for (int i = 0; i < m; i++) {
                    sum += v[i] * xp[i];
                }
                acc[t] += sum;
            }
        }
    }
}

// mv_reduce sums acc over the `lanes` lanes of each row into the row's first lane.
static inline void mv_reduce(thread float * acc, int nt, int lanes) {
    for (int t = 0; t < MV_TOKENS; t++) {
        if (t >= nt) {
            break;
        }
        for (int off = lanes / 2; off > 0; off /= 2) {
            acc[t] += simd_shuffle_down(acc[t], ushort(off));
        }
    }
}

template <typename F>
void mul_mv_impl(constant mul_mv_args & a, device const uchar * w, device const float * x,
                 device float * y, uint3 tgpig, ushort sgitg, ushort tiisg) {
    const int lanes = a.lanes;
    const int rps = 32 / lanes;
    const int row = (int(tgpig.x) * MV_SIMDGROUPS + sgitg) * rps + tiisg / lanes;
    const int j = tiisg % lanes;
    const int t0 = int(tgpig.y) * MV_TOKENS;
    const int nt = min(MV_TOKENS, a.n - t0);
    float acc[MV_TOKENS] = {0.0f};
    if (row < a.rows) {
        mul_mv_row<F>(w + (uint64_t)row * a.row_bytes, a.cols, x + (uint64_t)t0 * a.cols, nt, lanes, j, acc);
    }
    mv_reduce(acc, nt, lanes);
    if (j == 0 && row < a.rows) {
        for (int t = 0; t < nt; t++) {
            y[(uint64_t)(t0 + t) * a.rows + row] = acc[t];
        }
    }
}

// ---- experts (mul_mat_id): the same mat-vec per (token, slot) pair, tgpig.y the pair.
// An id outside [0, experts) gives a row of NaN rather than reading outside the weights.
//
// With a bounded expert cache (a.cached) the experts' matrices are slots of one arena: expert
// e is at w + where[e]·expert_bytes, and where[e] < 0 means it is not held (a NaN row, as for a
// bad id; the host never routes a pair there). A dispatch computes the pairs of tokens
// [t0, t1) and slots [s0, s1) and leaves the others' outputs alone, so that a step whose
// experts do not fit the arena at once runs in rounds.

// expert_at returns where expert e's matrix starts, or null when e is not a valid id or
// not held.
inline device const uchar * expert_at(int32_t cached, int32_t experts, uint64_t expert_bytes,
                                      device const uchar * w, constant int * where, float fe) {
    const int e = int(fe);
    if (!(fe >= 0.0f && e < experts && float(e) == fe)) {
        return nullptr;
    }
    const int at = cached ? where[e] : e;
    return at < 0 ? nullptr : w + (uint64_t)at * expert_bytes;
}

template <typename F>
void mul_mv_id_impl(constant mul_mv_id_args & a, device const uchar * w, device const float * x,
                    device const float * ids, device float * y, constant int * where,
                    uint3 tgpig, ushort sgitg, ushort tiisg) {
    const int lanes = a.lanes;
    const int rps = 32 / lanes;
    const int row = (int(tgpig.x) * MV_SIMDGROUPS + sgitg) * rps + tiisg / lanes;
    const int j = tiisg % lanes;
    const int pair = int(tgpig.y); // token pair / k, slot pair % k
    if (pair / a.k < a.t0 || pair / a.k >= a.t1 || pair % a.k < a.s0 || pair % a.k >= a.s1) {
        return; // another round's pair: the whole threadgroup leaves
    }
    device const uchar * we = expert_at(a.cached, a.experts, a.expert_bytes, w, where, ids[pair]);
    device const float * xp = x + (uint64_t)(a.x_per_slot ? pair : pair / a.k) * a.cols;
    float acc[MV_TOKENS] = {0.0f};
    if (we != nullptr && row < a.rows) {
        mul_mv_row<F>(we + (uint64_t)row * a.row_bytes, a.cols, xp, 1, lanes, j, acc);
    }
    mv_reduce(acc, 1, lanes);
    if (j == 0 && row < a.rows) {
        y[(uint64_t)pair * a.rows + row] = we != nullptr ? acc[0] : NAN;
    }
}

// ---- experts and the MoE weighted sum fused (decode): y[t][row] = Σ_j w[t][j] · (row of
// expert ids[t][j] · x[t][j]), tgpig.y the token. A row keeps the lanes of mul_mv_id and
// each slot's dot is reduced exactly as there before it is scaled and added in selection
// order, as weighted_sum_f32 adds them: the result is bit-identical to the two kernels, and
// the [n, k, rows] products never go through memory. An id outside [0, experts) makes the
// row NaN, as mul_mv_id's NaN row does through the sum. A round of slots [s0, s1) with
// s0 > 0 continues the sum the previous round left in y, in the same order.
template <typename F>
void mul_mv_id_sum_impl(constant mul_mv_id_args & a, device const uchar * w, device const float * x,
                        device const float * ids, device const float * ws, device float * y,
                        constant int * where, uint3 tgpig, ushort sgitg, ushort tiisg) {
    const int lanes = a.lanes;
    const int rps = 32 / lanes;
    const int row = (int(tgpig.x) * MV_SIMDGROUPS + sgitg) * rps + tiisg / lanes;
    const int j = tiisg % lanes;
    const int t = int(tgpig.y);
    if (t < a.t0 || t >= a.t1) {
        return;
    }
    float sum = a.s0 > 0 && row < a.rows ? y[(uint64_t)t * a.rows + row] : 0.0f;
    for (int s = a.s0; s < a.s1; s++) {
        const int pair = t * a.k + s;
        device const uchar * we = expert_at(a.cached, a.experts, a.expert_bytes, w, where, ids[pair]);
        device const float * xp = x + (uint64_t)(a.x_per_slot ? pair : t) * a.cols;
        float acc[MV_TOKENS] = {0.0f};
        if (we != nullptr && row < a.rows) {
            mul_mv_row<F>(we + (uint64_t)row * a.row_bytes, a.cols, xp, 1, lanes, j, acc);
        }
        mv_reduce(acc, 1, lanes);
        const float v = we != nullptr ? acc[0] : NAN;
        sum += v * ws[pair];
    }
    if (j == 0 && row < a.rows) {
        y[(uint64_t)t * a.rows + row] = sum;
    }
}

// ---- mat-mat (prefill: n larger)
//
// A threadgroup of MM_THREADS threads computes a tile of MM_TM rows by MM_TN tokens,
// stepping over the columns MM_TK at a time: half the threads decode the weight tile (one
// chunk of 16 each) into threadgroup memory while the other half copy the activations, then
// each SIMD group multiplies its 16 × 16 part of the tile with simdgroup_float8x8 matrices.
// The Mac's dense prefill would switch to MPSMatrixMultiplication in the backend (not built
// here; see matMul in metalkit/matmul.go).
#define MM_LD (MM_TK + 1) // padded row of a tile
static_assert((MM_TM / 16) * (MM_TN / 16) == MM_THREADS / 32, "one 16 x 16 part of the tile per SIMD group");
static_assert(MM_TM * (MM_TK / 16) < MM_THREADS, "threads left to copy the activations");
static_assert(MM_TK % 16 == 0, "whole chunks per step");

// mm_tile computes a tile of rows [r0, r0 + MM_TM) by the nt ≤ MM_TN tokens whose inputs are
// rows xrow[t] of x and whose outputs are rows yrow[t] of y (xrow, yrow in threadgroup
// memory, set before the call).
template <typename F>
static void mm_tile(device const uchar * w, uint64_t row_bytes, int rows, int cols, int r0,
                    device const float * x, device float * y,
                    threadgroup const int * xrow, threadgroup const int * yrow, int nt,
                    threadgroup float * ws, threadgroup float * xs, int tid) {
    // SIMD group sg computes rows [sr, sr + 16) by tokens [st, st + 16) of the tile as 2 × 2
    // 8×8 matrices.
    const int sg = tid / 32;
    const int sr = (sg / (MM_TN / 16)) * 16, st = (sg % (MM_TN / 16)) * 16;
    simdgroup_float8x8 acc[2][2];
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (int k0 = 0; k0 < cols; k0 += MM_TK) {
        if (tid < MM_TM * (MM_TK / 16)) {
            // Weights: one chunk of 16 per thread; rows past the end are zero.
            const int r = tid / (MM_TK / 16), h = tid % (MM_TK / 16);
            float v[16];
            if (r0 + r < rows) {
                F::deq16(w + (uint64_t)(r0 + r) * row_bytes, k0 / 16 + h, cols, v);
            } else {
                for (int i = 0; i < 16; i++) {
                    v[i] = 0.0f;
                }
            }
            for (int i = 0; i < 16; i++) {
                ws[r * MM_LD + 16 * h + i] = v[i];
            }
        } else {
            // Activations: MM_TN tokens by MM_TK columns over the other half of the threads.
            const int u = tid - MM_TM * (MM_TK / 16);
            const int per = MM_TN * MM_TK / (MM_THREADS - MM_TM * (MM_TK / 16));
            for (int i = 0; i < per; i++) {
                const int e = u * per + i;
                const int t = e / MM_TK, k = e % MM_TK;
                const bool in = t < nt && k0 + k < cols;
                xs[t * MM_LD + k] = in ? x[(uint64_t)xrow[t] * cols + k0 + k] : 0.0f;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k = 0; k < MM_TK; k += 8) {
            // a: 8 rows by 8 columns of the weights; b: 8 columns by 8 tokens, the transpose of
            // the activations as they lie in xs.
            simdgroup_float8x8 wa[2], xb[2];
            for (int i = 0; i < 2; i++) {
                simdgroup_load(wa[i], ws, MM_LD, ulong2(k, sr + 8 * i));
                simdgroup_load(xb[i], xs, MM_LD, ulong2(k, st + 8 * i), true);
            }
            for (int i = 0; i < 2; i++) {
                for (int j = 0; j < 2; j++) {
                    simdgroup_multiply_accumulate(acc[i][j], wa[i], xb[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // The tile goes through threadgroup memory (ws, rows by tokens) so that rows and tokens
    // past the ends are left out and y is written a row of tokens at a time.
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            simdgroup_store(acc[i][j], ws, MM_LD, ulong2(st + 8 * j, sr + 8 * i));
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = tid; e < MM_TM * MM_TN; e += MM_THREADS) {
        const int t = e / MM_TM, r = e % MM_TM;
        if (r0 + r < rows && t < nt) {
            y[(uint64_t)yrow[t] * rows + r0 + r] = ws[r * MM_LD + t];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

template <typename F>
void mul_mm_impl(constant mul_mm_args & a, device const uchar * w, device const float * x,
                 device float * y, threadgroup float * ws, threadgroup float * xs,
                 threadgroup int * xrow, uint3 tgpig, ushort tiitg) {
    const int t0 = int(tgpig.y) * MM_TN;
    if (tiitg < MM_TN) {
        xrow[tiitg] = t0 + tiitg;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    mm_tile<F>(w, a.row_bytes, a.rows, a.cols, int(tgpig.x) * MM_TM, x, y, xrow, xrow,
               min(MM_TN, a.n - t0), ws, xs, tiitg);
}

// ---- experts in prefill (mul_mat_id over many tokens): a threadgroup takes one tile of
// rows of one expert (tgpig.y) and gathers the (token, slot) pairs routed to it, in order,
// MM_THREADS ids at a time (a prefix sum over the threadgroup compacts the matches into
// `list`); every MM_TN pairs gathered make a tile of the mat-mat, so the expert's rows are
// decoded once per MM_TN pairs instead of once per pair. Nothing is planned on the host: the
// routing stays on the GPU. An id outside [0, experts) gives a row of NaN, as in mul_mv_id.
#define MM_ID_LIST (MM_TN + MM_THREADS)

template <typename F>
void mul_mm_id_impl(constant mul_mm_id_args & a, device const uchar * w, device const float * x,
                    device const float * ids, device float * y, constant int * where,
                    threadgroup float * ws, threadgroup float * xs,
                    threadgroup int * list, threadgroup int * xrow, threadgroup int * yrow,
                    threadgroup int * counts, uint3 tgpig, ushort tiitg, ushort sgitg, ushort tiisg) {
    const int r0 = int(tgpig.x) * MM_TM;
    const int e = int(tgpig.y);
    const int tid = tiitg;
    const int np = a.n * a.k;
    // A cached expert not held in this round has no pairs here; expert 0's threadgroups
    // still run to write the NaN rows of bad ids.
    const int at = a.cached ? where[e] : e;
    if (at < 0 && e != 0) {
        return;
    }
    device const uchar * we = w + (uint64_t)max(at, 0) * a.expert_bytes;
    int have = 0; // pairs in list (the same in every thread)
    for (int base = 0; base < np; base += MM_THREADS) {
        const int p = base + tid;
        uint m = 0;
        if (p < np && p / a.k >= a.t0 && p / a.k < a.t1 && p % a.k >= a.s0 && p % a.k < a.s1) {
            const float fe = ids[p];
            const int id = int(fe);
            const bool ok = fe >= 0.0f && id < a.experts && float(id) == fe;
            m = ok && id == e && at >= 0 ? 1u : 0u;
            if (!ok && e == 0) {
                for (int r = r0; r < min(a.rows, r0 + MM_TM); r++) {
                    y[(uint64_t)p * a.rows + r] = NAN;
                }
            }
        }
        const uint before = simd_prefix_exclusive_sum(m);
        const uint total = simd_sum(m);
        if (tiisg == 0) {
            counts[sgitg] = int(total);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        int off = have, added = 0;
        for (int s = 0; s < MM_THREADS / 32; s++) {
            off += s < sgitg ? counts[s] : 0;
            added += counts[s];
        }
        if (m) {
            list[off + int(before)] = p;
        }
        have += added;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        while (have >= MM_TN || (have > 0 && base + MM_THREADS >= np)) {
            const int nt = min(have, MM_TN);
            if (tid < nt) {
                const int pair = list[tid];
                xrow[tid] = a.x_per_slot ? pair : pair / a.k;
                yrow[tid] = pair;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            mm_tile<F>(we, a.row_bytes, a.rows, a.cols, r0, x, y, xrow, yrow, nt, ws, xs, tid);
            // Move the pairs not yet used to the front of the list.
            const int keep = have - nt;
            const int v = tid < keep ? list[nt + tid] : 0;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (tid < keep) {
                list[tid] = v;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            have = keep;
        }
    }
}

// ---- row lookups (embeddings): y[i] = row ids[i] of the table, decoded. tgpig.y is the
// token; each thread decodes one chunk of 16. An id outside the table gives a row of NaN.

template <typename F>
void get_rows_impl(constant get_rows_args & a, device const uchar * table, device const float * ids,
                   device float * y, uint3 tgpig, ushort tiitg) {
    const int i = int(tgpig.y);
    const int c = int(tgpig.x) * GET_ROWS_THREADS + tiitg;
    if (16 * c >= a.cols) {
        return;
    }
    const float fid = ids[i];
    const int id = int(fid);
    const bool ok = fid >= 0.0f && id < a.rows && float(id) == fid;
    float v[16];
    if (ok) {
        F::deq16(table + (uint64_t)id * a.row_bytes, c, a.cols, v);
    }
    device float * yr = y + (uint64_t)i * a.cols + 16 * c;
    const int m = min(16, a.cols - 16 * c);
    for (int j = 0; j < m; j++) {
        yr[j] = ok ? v[j] : NAN;
    }
}


// Gated DeltaNet (metalkit/deltanet.go): the gated delta rule over n tokens, from and back
// to the recurrent state [v_heads, dv, dk] (row j of head h is S[:, j], dk values).
//
// Per token and value head, with k and q of its key head (engine/ml's DeltaNet):
//	S ← e^g·S;  δ = β·(v − Sᵀk);  S ← S + k·δᵀ;  o = scale·Sᵀq
// Every state row j evolves on its own (it needs only v[j] besides the shared k, q, g, β),
// so each SIMD group keeps whole rows in registers, lane i holding features i, i+32, … and
// reductions over dk are simd_sums. The state is read and written once per call.
#include <metal_stdlib>
using namespace metal;

#include "args_attn.h"

// The token-by-token (recurrent) form, for decode: threadgroup (row block, value head),
// DN_TOKEN_ROWS rows per SIMD group.
kernel void deltanet_f32(constant deltanet_args &a [[buffer(0)]],
                         device const float *q [[buffer(1)]],
                         device const float *k [[buffer(2)]],
                         device const float *v [[buffer(3)]],
                         device const float *gs [[buffer(4)]],
                         device const float *beta [[buffer(5)]],
                         device float *state [[buffer(6)]],
                         device float *out [[buffer(7)]],
                         uint2 tg [[threadgroup_position_in_grid]],
                         uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
    const int h = int(tg.y);
    const int kh = h / (a.v_heads / a.k_heads);
    const int dk = a.dk, dv = a.dv, nk = dk / 32;
    const int j0 = int(tg.x) * (DN_THREADS / 32) * DN_TOKEN_ROWS + int(sg) * DN_TOKEN_ROWS;
    float S[DN_TOKEN_ROWS][DN_MAX_DK / 32];
    for (int r = 0; r < DN_TOKEN_ROWS; r++) {
        for (int e = 0; e < DN_MAX_DK / 32; e++) {
            const int j = j0 + r;
            S[r][e] = (j < dv && e < nk) ? state[(ulong(h) * ulong(dv) + ulong(j)) * ulong(dk) + ulong(int(lane) + 32 * e)] : 0.0f;
        }
    }
    for (int t = 0; t < a.n; t++) {
        const float decay = exp(gs[t * a.v_heads + h]);
        const float b = beta[t * a.v_heads + h];
        float kx[DN_MAX_DK / 32], qx[DN_MAX_DK / 32];
        for (int e = 0; e < DN_MAX_DK / 32; e++) {
            const ulong at = (ulong(t) * ulong(a.k_heads) + ulong(kh)) * ulong(dk) + ulong(int(lane) + 32 * e);
            kx[e] = e < nk ? k[at] : 0.0f;
            qx[e] = e < nk ? q[at] : 0.0f;
        }
        for (int r = 0; r < DN_TOKEN_ROWS; r++) {
            const int j = j0 + r;
            if (j >= dv) {
                break; // the same for every lane
            }
            float kd = 0.0f;
            for (int e = 0; e < DN_MAX_DK / 32; e++) {
                S[r][e] *= decay;
                kd += S[r][e] * kx[e];
            }
            kd = simd_sum(kd);
            const float delta = (v[(ulong(t) * ulong(a.v_heads) + ulong(h)) * ulong(dv) + ulong(j)] - kd) * b;
            float od = 0.0f;
            for (int e = 0; e < DN_MAX_DK / 32; e++) {
                S[r][e] += delta * kx[e];
                od += S[r][e] * qx[e];
            }
            od = simd_sum(od);
            if (lane == 0) {
                out[(ulong(t) * ulong(a.v_heads) + ulong(h)) * ulong(dv) + ulong(j)] = od * a.scale;
            }
        }
    }
    for (int r = 0; r < DN_TOKEN_ROWS; r++) {
        const int j = j0 + r;
        if (j >= dv) {
            break;
        }
        for (int e = 0; e < nk; e++) {
            state[(ulong(h) * ulong(dv) + ulong(j)) * ulong(dk) + ulong(int(lane) + 32 * e)] = S[r][e];
        }
    }
}

// The chunked form, for prefill (the CPU backend's, engine/cpu/deltanet.go): tokens go by
// in chunks of c. With Γ_t the cumulative log decay inside the chunk and S₀ the state before
// it, the deltas solve the unit lower-triangular system
//	δ_s + Σ_{r<s} β_s e^(Γ_s−Γ_r) (k_s·k_r) δ_r = β_s v_s − β_s e^(Γ_s) S₀ᵀk_s
// so δ = W_v − S₀ᵀ-applied W_k with W = (I+A)⁻¹·[βv | βe^Γ k] by forward substitution; then
//	o_t = scale·(e^(Γ_t) S₀ᵀq_t + Σ_{s≤t} e^(Γ_t−Γ_s)(q_t·k_s) δ_s)
//	S   = e^(Γ_c) S₀ + Σ_s e^(Γ_c−Γ_s) k_s δ_sᵀ
// Threadgroup (block of 32 rows, value head), DN_CHUNK_ROWS rows per SIMD group. Per chunk
// the threadgroup stages k, builds A, the decayed q·k products and W_k (the same for every
// row block of the head: a little work done again per block, instead of device scratch),
// solves W_v for its own rows, then each SIMD group applies its rows. Threadgroup memory
// (floats): k and W_k [c][dk] each, A and QK [c][c] each, Γ and β [c], W_v→δ and the state
// part of the outputs [c][32] each.
kernel void deltanet_chunk_f32(constant deltanet_args &a [[buffer(0)]],
                               device const float *q [[buffer(1)]],
                               device const float *k [[buffer(2)]],
                               device const float *v [[buffer(3)]],
                               device const float *gs [[buffer(4)]],
                               device const float *beta [[buffer(5)]],
                               device float *state [[buffer(6)]],
                               device float *out [[buffer(7)]],
                               threadgroup float *mem [[threadgroup(0)]],
                               uint2 tg [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]]) {
    const int BR = (DN_THREADS / 32) * DN_CHUNK_ROWS; // rows per threadgroup
    const int C = a.chunk;
    const int h = int(tg.y);
    const int kh = h / (a.v_heads / a.k_heads);
    const int dk = a.dk, dv = a.dv, nk = dk / 32;
    const int jt = int(tg.x) * BR;                       // the threadgroup's first row
    const int jl = int(sg) * DN_CHUNK_ROWS;              // the SIMD group's first row, locally
    threadgroup float *sk = mem;                         // [C][dk]
    threadgroup float *swk = sk + C * dk;                // [C][dk]
    threadgroup float *sA = swk + C * dk;                // [C][C]
    threadgroup float *sQK = sA + C * C;                 // [C][C]
    threadgroup float *sgam = sQK + C * C;               // [C]
    threadgroup float *sbeta = sgam + C;                 // [C]
    threadgroup float *su = sbeta + C;                   // [C][BR]
    threadgroup float *so = su + C * BR;                 // [C][BR]

    float S[DN_CHUNK_ROWS][DN_MAX_DK / 32];
    for (int r = 0; r < DN_CHUNK_ROWS; r++) {
        const int j = jt + jl + r;
        for (int e = 0; e < DN_MAX_DK / 32; e++) {
            S[r][e] = (j < dv && e < nk) ? state[(ulong(h) * ulong(dv) + ulong(j)) * ulong(dk) + ulong(int(lane) + 32 * e)] : 0.0f;
        }
    }

    for (int t0 = 0; t0 < a.n; t0 += C) {
        const int c = min(C, a.n - t0);
        // Stage k, β and Γ.
        for (int i = int(tid); i < c * dk; i += DN_THREADS) {
            const int s = i / dk;
            sk[i] = k[(ulong(t0 + s) * ulong(a.k_heads) + ulong(kh)) * ulong(dk) + ulong(i % dk)];
        }
        if (tid == 0) {
            float acc = 0.0f;
            for (int s = 0; s < c; s++) {
                acc += gs[(t0 + s) * a.v_heads + h];
                sgam[s] = acc;
                sbeta[s] = beta[(t0 + s) * a.v_heads + h];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // A[s][r] = β_s e^(Γ_s−Γ_r) k_s·k_r and QK[s][r] = e^(Γ_s−Γ_r) q_s·k_r for r < s;
        // QK[s][s] = q_s·k_s.
        for (int i = int(tid); i < c * c; i += DN_THREADS) {
            const int s = i / c, r = i % c;
            if (r > s) {
                continue;
            }
            device const float *qs = q + (ulong(t0 + s) * ulong(a.k_heads) + ulong(kh)) * ulong(dk);
            float qk = 0.0f, kk = 0.0f;
            for (int d = 0; d < dk; d++) {
                qk += qs[d] * sk[r * dk + d];
                kk += sk[s * dk + d] * sk[r * dk + d];
            }
            if (r == s) {
                sQK[s * C + s] = qk;
            } else {
                const float e = exp(sgam[s] - sgam[r]);
                sA[s * C + r] = sbeta[s] * e * kk;
                sQK[s * C + r] = e * qk;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Forward substitution, one column per thread: W_k's dk columns and W_v's columns of
        // this threadgroup's rows.
        for (int i = int(tid); i < dk + BR; i += DN_THREADS) {
            if (i < dk) {
                for (int s = 0; s < c; s++) {
                    float w = sbeta[s] * exp(sgam[s]) * sk[s * dk + i];
                    for (int r = 0; r < s; r++) {
                        w += -sA[s * C + r] * swk[r * dk + i];
                    }
                    swk[s * dk + i] = w;
                }
            } else {
                const int jc = i - dk, j = jt + jc;
                for (int s = 0; s < c; s++) {
                    float w = j < dv ? sbeta[s] * v[(ulong(t0 + s) * ulong(a.v_heads) + ulong(h)) * ulong(dv) + ulong(j)] : 0.0f;
                    for (int r = 0; r < s; r++) {
                        w += -sA[s * C + r] * su[r * BR + jc];
                    }
                    su[s * BR + jc] = w;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Each row: the deltas δ_s[j] = W_v[s][j] − S₀[:, j]·W_k[s], the state's part of the
        // outputs e^(Γ_s) S₀[:, j]·q_s, then the row's update.
        const float last = sgam[c - 1];
        const float egLast = exp(last);
        for (int r = 0; r < DN_CHUNK_ROWS; r++) {
            const int jc = jl + r, j = jt + jc;
            if (j >= dv) {
                break; // the same for every lane
            }
            float u[DN_MAX_CHUNK];
            for (int s = 0; s < DN_MAX_CHUNK; s++) {
                if (s >= c) {
                    break;
                }
                device const float *qs = q + (ulong(t0 + s) * ulong(a.k_heads) + ulong(kh)) * ulong(dk);
                float wk = 0.0f, sq = 0.0f;
                for (int e = 0; e < DN_MAX_DK / 32; e++) {
                    if (e < nk) {
                        const int d = int(lane) + 32 * e;
                        wk += S[r][e] * swk[s * dk + d];
                        sq += S[r][e] * qs[d];
                    }
                }
                u[s] = su[s * BR + jc] - simd_sum(wk);
                sq = exp(sgam[s]) * simd_sum(sq);
                if (lane == 0) {
                    so[s * BR + jc] = sq;
                }
            }
            for (int e = 0; e < DN_MAX_DK / 32; e++) {
                S[r][e] *= egLast;
            }
            for (int s = 0; s < DN_MAX_CHUNK; s++) {
                if (s >= c) {
                    break;
                }
                const float f = exp(last - sgam[s]) * u[s];
                for (int e = 0; e < DN_MAX_DK / 32; e++) {
                    if (e < nk) {
                        S[r][e] += f * sk[s * dk + int(lane) + 32 * e];
                    }
                }
            }
            // Every lane holds the same u (simd_sum broadcasts); the SIMD group's lanes wrote
            // so and read su only in its own column, so after its reads lane 0 may replace
            // W_v by δ there.
            simdgroup_barrier(mem_flags::mem_threadgroup);
            if (lane == 0) {
                for (int s = 0; s < c; s++) {
                    su[s * BR + jc] = u[s];
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // The chunk's outputs: o_t = scale·(state part + Σ_{s≤t} QK[t][s]·δ_s).
        for (int i = int(tid); i < c * BR; i += DN_THREADS) {
            const int t = i / BR, jc = i % BR, j = jt + jc;
            if (j >= dv) {
                continue;
            }
            float o = so[t * BR + jc];
            for (int s = 0; s <= t; s++) {
                o += sQK[t * C + s] * su[s * BR + jc];
            }
            out[(ulong(t0 + t) * ulong(a.v_heads) + ulong(h)) * ulong(dv) + ulong(j)] = o * a.scale;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    for (int r = 0; r < DN_CHUNK_ROWS; r++) {
        const int j = jt + jl + r;
        if (j >= dv) {
            break;
        }
        for (int e = 0; e < nk; e++) {
            state[(ulong(h) * ulong(dv) + ulong(j)) * ulong(dk) + ulong(int(lane) + 32 * e)] = S[r][e];
        }
    }
}

// Argument structs of the KV cache, attention, causal convolution and Gated DeltaNet kernels
// (metalkit/cache.go, attention.go, deltanet.go). Every field is 4 bytes, so the C layout
// is the Go mirror's encoding/binary packing (args_attn.go) with no padding.
#pragma once

#include "common.h"

// Threads per threadgroup of the decode attention kernels: one thread per position of a
// split in the score phase, so a split is at most this many positions.
#define ATTN_DECODE_THREADS 128
// Most query heads one decode threadgroup computes (Qwen3-Next: 16 query heads over 2 KV
// heads); more per KV head takes the per-query-head variant.
#define ATTN_MAX_GROUP 8
// Most sequences one batched decode dispatch attends (attn_decode_batch_*): the per-sequence
// arrays of its argument struct, 688 bytes at 32, go by setBytes (at most 4 KiB); a larger
// batch takes one dispatch per 32 sequences.
#define ATTN_BATCH_MAX_SEQS 32
// Query tokens per prefill threadgroup: one SIMD group each. Their queries of up to
// ATTN_MAX_GROUP heads of ATTN_MAX_HEAD_DIM take 16 KiB of threadgroup memory at 2.
#define ATTN_PREFILL_QUERIES 2
// Most features per head of the prefill kernel: 32 lanes × 8 accumulators.
#define ATTN_MAX_HEAD_DIM 256

// The score of a position a query does not see, and the running max before any: finite,
// because Metal compiles with fast math, under which infinities (and exp(−inf − −inf))
// are not to be relied on; exp of it minus any real score is 0.
#define ATTN_NO_SCORE (-FLT_MAX / 2)

// Conv1DCausal: most taps (Qwen3-Next uses 4).
#define CONV_MAX_KERNEL 8
#define CONV_THREADS 128

// DeltaNet: state rows (value features) per SIMD group; 4 SIMD groups per threadgroup.
#define DN_THREADS 128
#define DN_TOKEN_ROWS 4
#define DN_CHUNK_ROWS 8
// Most tokens of one chunk of the chunked form (the host picks 16 or 8 by key size so the
// threadgroup memory stays under 32 KiB), and most key features (32 lanes × 8).
#define DN_MAX_CHUNK 16
#define DN_MAX_DK 256

// kv_store_f32/f16 and kv_load_f32/f16: n positions from pos0 of one layer; row is
// kv_heads·head_dim, the values of one position.
// kv_store_q8_0 and kv_load_q8_0 also read head_dim and the Walsh–Hadamard rotations of
// keys and values (ml.KVRotations; 0: none) with their scales 1/√rot.
struct kv_store_args {
    int32_t n;
    int32_t row;
    int32_t pos0;
    int32_t block_size;
    int32_t head_dim;
    int32_t rot_k;
    int32_t rot_v;
    float scale_k;
    float scale_v;
};

struct kv_load_args {
    int32_t n;
    int32_t row;
    int32_t pos0;
    int32_t block_size;
    int32_t head_dim;
    int32_t rot_k;
    int32_t rot_v;
    float scale_k;
    float scale_v;
};

// kv_q8_0_rows: rows of len values rotated by rot (0: none) with scale 1/√rot, then, when
// round is 1, rounded through Q8_0 blocks: a q8_0 cache's queries and outputs.
struct kv_rows_args {
    int32_t rows;
    int32_t len;
    int32_t rot;
    float scale;
    int32_t round;
};

// attn_decode_f32/f16: one query token at position positions−1. Threadgroup (split, y):
// grouped (tg_heads == group) y is the KV head and the group's query heads are computed
// together; per query head (tg_heads == 1) y is the query head. A split of split positions
// never crosses a cache block.
struct attn_decode_args {
    int32_t heads;
    int32_t kv_heads;
    int32_t head_dim;
    int32_t group;     // query heads per KV head
    int32_t tg_heads;  // query heads per threadgroup: group or 1
    int32_t positions; // positions attended: 0 … positions−1
    int32_t split;     // positions per split
    int32_t nsplit;    // splits; 1 writes the output directly, more leave partials to merge
    int32_t block_size;
    float scale;
};

// attn_merge_f32: combines nsplit partial (max, sum, accumulator) of every head.
struct attn_merge_args {
    int32_t heads;
    int32_t head_dim;
    int32_t nsplit;
    int32_t pad0;
};

// attn_decode_batch_f32/f16 and attn_merge_batch_f32: one query token of each of seqs
// sequences of one KV pool. d holds what they share (its positions and nsplit are unused):
// heads, group, tg_heads, split, block size, scale. Per sequence s: its queries at q_off[s]
// float4s into q, its output at out_off[s] floats into out, positions[s] positions attended,
// its block table at entry table0[s] of tables, and its partials from the batch's split
// split0[s] (splits in sequence order; sequence s has ⌈positions[s]/split⌉ of them).
struct attn_decode_batch_args {
    struct attn_decode_args d;
    int32_t seqs;
    int32_t splits; // the batch's splits: the dispatch's threadgroups along x
    int32_t q_off[ATTN_BATCH_MAX_SEQS];
    int32_t out_off[ATTN_BATCH_MAX_SEQS];
    int32_t positions[ATTN_BATCH_MAX_SEQS];
    int32_t table0[ATTN_BATCH_MAX_SEQS];
    int32_t split0[ATTN_BATCH_MAX_SEQS];
};

// attn_prefill_f32/f16: n query tokens at positions pos0 … pos0+n−1, causal.
struct attn_prefill_args {
    int32_t n;
    int32_t heads;
    int32_t kv_heads;
    int32_t head_dim;
    int32_t group;
    int32_t tg_heads; // query heads per threadgroup, of one KV head: a divisor of group, or 1
    int32_t pos0;
    int32_t block_size;
    float scale;
};

// attn_sinks_f32/f16: n query tokens at positions pos0 … pos0+n−1, causal, over the last
// window positions (0: all), with one sink logit per query head in the softmax when
// has_sinks is 1 (0: plain sliding-window attention; the sinks buffer is not read).
struct attn_sinks_args {
    int32_t n;
    int32_t heads;
    int32_t kv_heads;
    int32_t head_dim;
    int32_t pos0;
    int32_t block_size;
    int32_t window;
    int32_t has_sinks;
    float scale;
};

// conv1d_causal_f32/f16 (the weight's type): x [n, channels], w [channels, taps],
// state [taps−1, channels].
struct conv1d_causal_args {
    int32_t n;
    int32_t channels;
    int32_t taps; // the kernel size (kernel is a keyword of MSL)
    int32_t pad0;
};

// deltanet_f32 (token by token) and deltanet_chunk_f32 (chunk tokens at a time).
struct deltanet_args {
    int32_t n;
    int32_t k_heads;
    int32_t v_heads;
    int32_t dk;
    int32_t dv;
    int32_t chunk;
    float scale;
    int32_t pad0;
};

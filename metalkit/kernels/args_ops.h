// args_ops.h: argument structs of the element-wise operations, norms, RoPE, routing, … kernels
// (ops.metal). Each struct's Go mirror is in args_ops.go, same fields in the same order;
// every field is 4 bytes, so the C layout has no hidden padding and equals encoding/binary's
// packing.
#pragma once

#include "common.h"

// Operations of unary_f32, selected by its op field (one kernel, a uniform branch: the
// choice costs nothing beside the memory traffic these kernels are bound by).
#define UNARY_SIGMOID 0
#define UNARY_SILU 1
#define UNARY_SOFTPLUS 2
#define UNARY_SCALE 3

// Operations of binary_f32 and bcast_f32.
#define BINARY_ADD 0
#define BINARY_MUL 1
#define BINARY_SWIGLU 2 // silu(a) · b
#define BINARY_GEGLU 3  // gelu(a) · b, GELU as ml.GELU (llama.cpp's float16 table)
#define BINARY_CLAMPED_SWIGLU 4 // ml.ClampedSwiGLU(a, b, alpha, limit): gpt-oss's experts

// y[i] = op(x[i]) for i < n.
struct unary_f32_args {
    int32_t n;
    int32_t op;
    float scale; // UNARY_SCALE's factor
    int32_t pad;
};

// y[i] = a[i] op b[i] for i < n.
struct binary_f32_args {
    int32_t n;
    int32_t op;
    float alpha; // BINARY_CLAMPED_SWIGLU's parameters
    float limit;
};

// y[i] = x[i] op w[i % d] for i < n (w a vector of d values: biases, per-head constants).
struct bcast_f32_args {
    int32_t n;
    int32_t d;
    int32_t op; // BINARY_ADD or BINARY_MUL
    int32_t pad;
};

// One threadgroup per row of d values: y = x / sqrt(mean(x²) + eps) · w (w when has_w).
struct rms_norm_f32_args {
    int32_t rows;
    int32_t d;
    float eps;
    int32_t has_w;
};

// One threadgroup per row of d values: y = x / max(‖x‖₂, eps).
struct l2_norm_f32_args {
    int32_t rows;
    int32_t d;
    float eps;
    int32_t pad;
};

// One thread per feature of x [n, heads, head_dim]; the first dims features of each head
// rotate by the angles of table [n, dims/2] (cos) followed by [n, dims/2] (sin).
struct rope_f32_args {
    int32_t n;
    int32_t heads;
    int32_t head_dim;
    int32_t dims;
    int32_t neox; // pairs (k, k + dims/2) instead of (2k, 2k+1)
    int32_t pad0;
    int32_t pad1;
    int32_t pad2;
};

// One threadgroup per row of experts logits: softmax, the k largest (ties to the lower id)
// as float ids and their probabilities, renormalised when norm is set. Threadgroup memory:
// experts floats.
struct route_f32_args {
    int32_t n;
    int32_t experts;
    int32_t k;
    int32_t norm;
    float min_sum; // the smallest sum the renormalisation divides by
    int32_t pad0;
    int32_t pad1;
    int32_t pad2;
};

// One thread per element of y [n, d] = Σ_j w[i][j] · x[i][j][:], in slot order.
struct weighted_sum_f32_args {
    int32_t n;
    int32_t k;
    int32_t d;
    int32_t pad;
};

// One threadgroup per row of d values: the index of the largest (the first on ties), as a
// float.
struct argmax_f32_args {
    int32_t rows;
    int32_t d;
    int32_t pad0;
    int32_t pad1;
};

// One thread per element: y[r·dst_stride + c] = x[r·src_stride + c] for r < rows, c < cols
// (Slice, Concat, Assign; the regions' offsets place the columns).
struct copy_f32_args {
    int32_t rows;
    int32_t cols;
    int32_t src_stride;
    int32_t dst_stride;
};


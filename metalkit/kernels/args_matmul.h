// args_matmul.h: argument structs of the matrix kernels (mul_mv_*, mul_mm_*, mul_mv_id_*,
// mul_mm_id_*) and the row lookups (get_rows_*). Their Go mirrors are in args_matmul.go,
// same fields in the same order.
#pragma once

#include "common.h"

struct mul_mv_args {
    int32_t  rows;      // output rows (weight rows)
    int32_t  cols;      // inputs per row
    int32_t  n;         // tokens
    int32_t  lanes;     // SIMD lanes per row (a power of two, 1..32)
    uint64_t row_bytes; // bytes of one weight row
};

struct mul_mm_args {
    int32_t  rows;
    int32_t  cols;
    int32_t  n;
    int32_t  pad0;
    uint64_t row_bytes;
};

struct mul_mv_id_args {
    int32_t  rows;
    int32_t  cols;
    int32_t  n;          // tokens
    int32_t  lanes;
    int32_t  k;          // slots per token
    int32_t  experts;
    int32_t  x_per_slot; // 1: x is [n, k, cols]; 0: x is [n, cols], shared by the slots
    int32_t  cached;     // 1: expert e is at w + where[e]·expert_bytes (an expert cache arena)
    int32_t  t0;         // the tokens [t0, t1) and slots [s0, s1) this dispatch computes
    int32_t  t1;
    int32_t  s0;
    int32_t  s1;
    uint64_t row_bytes;
    uint64_t expert_bytes; // bytes of one expert's matrix (of a cache slot when cached)
};

struct mul_mm_id_args {
    int32_t  rows;
    int32_t  cols;
    int32_t  n;          // tokens
    int32_t  k;          // slots per token
    int32_t  experts;
    int32_t  x_per_slot; // 1: x is [n, k, cols]; 0: x is [n, cols], shared by the slots
    int32_t  cached;     // as in mul_mv_id_args
    int32_t  t0;
    int32_t  t1;
    int32_t  s0;
    int32_t  s1;
    int32_t  pad0;
    uint64_t row_bytes;
    uint64_t expert_bytes; // bytes of one expert's matrix (of a cache slot when cached)
};

struct get_rows_args {
    int32_t  cols;
    int32_t  n;
    int32_t  rows;       // rows in the table: ids at or beyond it yield NaN rows
    int32_t  pad0;
    uint64_t row_bytes;
};

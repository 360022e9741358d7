// quant_blocks.h: decoders of the weight formats for the matrix kernels. Each format is a struct with
//
//   QK     values per block (1 for the plain types)
//   BYTES  bytes per block
//   deq16(row, c, cols, y)  the 16 values [16c, 16c+16) of a row starting at row, as floats
//
// A chunk of 16 values is the unit every kernel decodes: it is one sub-block of the K-quants
// (a scale and a min), two groups of 8 of the i-quants that share their scale (IQ1_M: one qh
// byte and one 3-bit scale for the two groups, read once), half a Q8_0 block. The plain types
// zero the values at and beyond cols, so rows of any length work; every other type needs
// cols to be a multiple of its block.
//
// Arithmetic follows engine/quant's dequantization (which is ggml's to_float): the same
// products, so that a weight decodes to the value the CPU backend uses.
#pragma once

#include "common.h"
#include "quant_tables.h"

// Fields of a block are 2-byte aligned at best (every block size but MXFP4's is even), so
// wider words are put together from halves.
static inline float ld_half(device const uchar * p) {
    return float(*(device const half *)p);
}
static inline uint ld_u16(device const uchar * p) {
    return uint(*(device const ushort *)p);
}
static inline uint ld_u32(device const uchar * p) {
    device const ushort * q = (device const ushort *)p;
    return uint(q[0]) | (uint(q[1]) << 16);
}

// The chunk's block and its 16-value index inside the block.
#define CHUNK_BLOCK(F) device const uchar * b = row + (uint64_t)((c * 16) / F::QK) * F::BYTES; const int il = (c * 16 % F::QK) / 16;

struct fmt_f32 {
    enum { QK = 1, BYTES = 4 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        device const float * w = (device const float *)row;
        for (int j = 0; j < 16; j++) {
            const int i = 16 * c + j;
            y[j] = i < cols ? w[i] : 0.0f;
        }
    }
};

struct fmt_f16 {
    enum { QK = 1, BYTES = 2 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        device const half * w = (device const half *)row;
        for (int j = 0; j < 16; j++) {
            const int i = 16 * c + j;
            y[j] = i < cols ? float(w[i]) : 0.0f;
        }
    }
};

struct fmt_bf16 {
    enum { QK = 1, BYTES = 2 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        device const ushort * w = (device const ushort *)row;
        for (int j = 0; j < 16; j++) {
            const int i = 16 * c + j;
            y[j] = i < cols ? as_type<float>(uint(w[i]) << 16) : 0.0f;
        }
    }
};

// Q4_0: d, 16 bytes: value j is the low nibble of byte j, value j+16 its high nibble, less 8.
struct fmt_q4_0 {
    enum { QK = 32, BYTES = 18 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q4_0)
        const float d = ld_half(b);
        device const uchar * q = b + 2;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            y[j] = float(int((q[j] >> shift) & 0xf) - 8) * d;
        }
    }
};

// Q4_1: d, m, 16 bytes of nibbles as Q4_0, unsigned: v·d + m.
struct fmt_q4_1 {
    enum { QK = 32, BYTES = 20 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q4_1)
        const float d = ld_half(b), m = ld_half(b + 2);
        device const uchar * q = b + 4;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            y[j] = float((q[j] >> shift) & 0xf) * d + m;
        }
    }
};

// Q5_0: d, qh (32 fifth bits: bit j for value j), 16 bytes of nibbles as Q4_0; less 16.
struct fmt_q5_0 {
    enum { QK = 32, BYTES = 22 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q5_0)
        const float d = ld_half(b);
        const uint qh = ld_u32(b + 2);
        device const uchar * q = b + 6;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            const uint v = ((q[j] >> shift) & 0xf) | (((qh >> (16 * il + j)) & 1) << 4);
            y[j] = float(int(v) - 16) * d;
        }
    }
};

// Q5_1: d, m, qh, 16 bytes: as Q5_0, unsigned: v·d + m.
struct fmt_q5_1 {
    enum { QK = 32, BYTES = 24 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q5_1)
        const float d = ld_half(b), m = ld_half(b + 2);
        const uint qh = ld_u32(b + 4);
        device const uchar * q = b + 8;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            const uint v = ((q[j] >> shift) & 0xf) | (((qh >> (16 * il + j)) & 1) << 4);
            y[j] = float(v) * d + m;
        }
    }
};

// IQ4_NL: d, 16 bytes of nibbles as Q4_0, levels kvalues_iq4nl.
struct fmt_iq4_nl {
    enum { QK = 32, BYTES = 18 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq4_nl)
        const float d = ld_half(b);
        device const uchar * q = b + 2;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            y[j] = d * kvalues_iq4nl[(q[j] >> shift) & 0xf];
        }
    }
};

// MXFP4: an E8M0 exponent byte e, 16 bytes of FP4 nibbles as Q4_0, levels kvalues_mxfp4
// (doubled) times 2^(e−128) (half the block scale), built from its bits as ggml does. The
// 17-byte block is the one odd size: its fields are single bytes.
struct fmt_mxfp4 {
    enum { QK = 32, BYTES = 17 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_mxfp4)
        const uint e = b[0];
        const float d = as_type<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
        device const uchar * q = b + 1;
        const int shift = 4 * il;
        for (int j = 0; j < 16; j++) {
            y[j] = kvalues_mxfp4[(q[j] >> shift) & 0xf] * d;
        }
    }
};

// Q8_0: d (f16), 32 int8.
struct fmt_q8_0 {
    enum { QK = 32, BYTES = 34 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q8_0)
        const float d = ld_half(b);
        device const int8_t * q = (device const int8_t *)(b + 2) + 16 * il;
        for (int j = 0; j < 16; j++) {
            y[j] = float(q[j]) * d;
        }
    }
};

// Q2_K: scales[16] (4-bit scale | 4-bit min), qs[64] (2 bits), d, dmin.
struct fmt_q2_K {
    enum { QK = 256, BYTES = 84 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q2_K)
        const float d = ld_half(b + 80), dmin = ld_half(b + 82);
        const uint sc = b[il];
        const float dl = d * float(sc & 0xf), ml = dmin * float(sc >> 4);
        // 16-value chunk il: half n = il/8 of the block, shift 2*((il%8)/2), bytes 16*(il%2).
        device const uchar * q = b + 16 + 32 * (il / 8) + 16 * (il % 2);
        const int shift = 2 * ((il % 8) / 2);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * float((q[j] >> shift) & 3) - ml;
        }
    }
};

// Q3_K: hmask[32] (third bits), qs[64] (2 bits), scales[12] (16 6-bit scales biased by 32),
// d. Laid out as Q2_K: chunk il takes bits 2((il%8)/2) of qs[32(il/8) + 16(il%2) + l] and bit
// 4(il/8) + (il%8)/2 of hmask[16(il%2) + l]; a clear third bit subtracts 4.
struct fmt_q3_K {
    enum { QK = 256, BYTES = 110 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q3_K)
        // Scale il: low nibble of byte il%4 (+4 for odd il/4) shifted by 4·(il/8), high two bits
        // from byte 8 + il%4 shifted by 2·(il/4).
        const int wi = il / 4, bi = il % 4;
        const uint lo = (b[96 + 4 * (wi % 2) + bi] >> (4 * (wi / 2))) & 0xf;
        const uint hi = (b[104 + bi] >> (2 * wi)) & 3;
        const float dl = ld_half(b + 108) * float(int(lo | (hi << 4)) - 32);
        device const uchar * q = b + 32 + 32 * (il / 8) + 16 * (il % 2);
        device const uchar * hm = b + 16 * (il % 2);
        const int shift = 2 * ((il % 8) / 2);
        const uint m = 1u << (4 * (il / 8) + (il % 8) / 2);
        for (int j = 0; j < 16; j++) {
            const int v = int((q[j] >> shift) & 3) - ((hm[j] & m) ? 0 : 4);
            y[j] = dl * float(v);
        }
    }
};

// The j-th 6-bit scale and min of a Q4_K/Q5_K block.
static inline void scale_min_k4(int j, device const uchar * s, thread uint & sc, thread uint & m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K: d, dmin, scales[12], qs[128]; 64-value group g holds low nibbles (scale 2g) then high
// nibbles (scale 2g+1) of qs[32g..32g+32).
struct fmt_q4_K {
    enum { QK = 256, BYTES = 144 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q4_K)
        const int g = il / 4, hi = (il / 2) % 2;
        uint sc, m;
        scale_min_k4(2 * g + hi, b + 4, sc, m);
        const float dl = ld_half(b) * float(sc), ml = ld_half(b + 2) * float(m);
        device const uchar * q = b + 16 + 32 * g + 16 * (il % 2);
        const int shift = 4 * hi;
        for (int j = 0; j < 16; j++) {
            y[j] = dl * float((q[j] >> shift) & 0xf) - ml;
        }
    }
};

// Q5_K: Q4_K's layout plus qh[32], the fifth bits (bit 2g+hi of qh[l] for value l of the
// half-group).
struct fmt_q5_K {
    enum { QK = 256, BYTES = 176 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q5_K)
        const int g = il / 4, hi = (il / 2) % 2, l0 = 16 * (il % 2);
        uint sc, m;
        scale_min_k4(2 * g + hi, b + 4, sc, m);
        const float dl = ld_half(b) * float(sc), ml = ld_half(b + 2) * float(m);
        device const uchar * qh = b + 16 + l0;
        device const uchar * q = b + 48 + 32 * g + l0;
        const int shift = 4 * hi;
        const uint hbit = 1u << (2 * g + hi);
        for (int j = 0; j < 16; j++) {
            const uint v = ((q[j] >> shift) & 0xf) | ((qh[j] & hbit) ? 16u : 0u);
            y[j] = dl * float(v) - ml;
        }
    }
};

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Each 128-value half n holds four quarters
// qd: low/high nibbles (qd/2) of ql[64n + 32(qd%2) + l] with bits 2qd of qh[32n + l].
struct fmt_q6_K {
    enum { QK = 256, BYTES = 210 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_q6_K)
        const int n = il / 8, qd = (il % 8) / 2, l0 = 16 * (il % 2);
        const float d = ld_half(b + 208);
        device const int8_t * scales = (device const int8_t *)(b + 192);
        const float dl = d * float(scales[8 * n + (il % 2) + 2 * qd]);
        device const uchar * ql = b + 64 * n + 32 * (qd % 2) + l0;
        device const uchar * qh = b + 128 + 32 * n + l0;
        const int shift = 4 * (qd / 2), hshift = 2 * qd;
        for (int j = 0; j < 16; j++) {
            const int v = int(((ql[j] >> shift) & 0xf) | (((qh[j] >> hshift) & 3) << 4)) - 32;
            y[j] = dl * float(v);
        }
    }
};

// The sign of bit j of an 8-bit sign mask, as a factor (multiplied, as ggml does).
static inline float sign_of(uint s, int j) {
    return (s >> j) & 1 ? -1.0f : 1.0f;
}

// grid8_signed writes the 8 grid values g scaled by d with the signs of mask s.
static inline void grid8_signed(constant uchar * g, uint s, float d, thread float * y) {
    for (int j = 0; j < 8; j++) {
        y[j] = d * float(g[j]) * sign_of(s, j);
    }
}

// grid44_signed writes two 4-value grid points g1, g2 scaled by d with the signs of mask s.
static inline void grid44_signed(constant uchar * g1, constant uchar * g2, uint s, float d, thread float * y) {
    for (int j = 0; j < 4; j++) {
        y[j] = d * float(g1[j]) * sign_of(s, j);
        y[j + 4] = d * float(g2[j]) * sign_of(s, j + 4);
    }
}

// grid8_delta writes the 8 values of an IQ1 grid point g (int8 -1, 0, 1 as bytes) plus
// delta, scaled by d: flipping the top bit of a byte and subtracting 128 signs it.
static inline void grid8_delta(constant uchar * g, float delta, float d, thread float * y) {
    for (int j = 0; j < 8; j++) {
        y[j] = d * (float(int(g[j] ^ 0x80) - 128) + delta);
    }
}

// IQ2_XXS: d, then per 32-value group 4 grid indices and a word of four 7-bit sign indices
// and a 4-bit scale.
struct fmt_iq2_xxs {
    enum { QK = 256, BYTES = 66 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq2_xxs)
        const int ib = il / 2;
        device const uchar * qs = b + 2 + 8 * ib;
        const uint aux = ld_u32(qs + 4);
        const float db = ld_half(b) * (0.5f + float(aux >> 28)) * 0.25f;
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            constant uchar * g = iq2xxs_grid[qs[l]];
            const uint s = ksigns_iq2xs[(aux >> (7 * l)) & 127];
            grid8_signed(g, s, db, y + 8 * h);
        }
    }
};

// IQ2_XS: d, 32 words of 9-bit grid index | 7-bit sign index, 8 bytes of two 4-bit scales.
struct fmt_iq2_xs {
    enum { QK = 256, BYTES = 74 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq2_xs)
        const int ib = il / 2;
        const uint sc = b[66 + ib];
        const float db = ld_half(b) * (0.5f + float((il % 2) ? sc >> 4 : sc & 0xf)) * 0.25f;
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            const uint q = ld_u16(b + 2 + 2 * (4 * ib + l));
            constant uchar * g = iq2xs_grid[q & 511];
            const uint s = ksigns_iq2xs[q >> 9];
            grid8_signed(g, s, db, y + 8 * h);
        }
    }
};

// IQ2_S: d, qs[32] (grid index low bits), signs[32], qh[8] (grid index high bits), scales[8].
struct fmt_iq2_s {
    enum { QK = 256, BYTES = 82 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq2_s)
        const int ib = il / 2;
        const uint sc = b[74 + ib];
        const float db = ld_half(b) * (0.5f + float((il % 2) ? sc >> 4 : sc & 0xf)) * 0.25f;
        const uint qh = b[66 + ib];
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            constant uchar * g = iq2s_grid[b[2 + 4 * ib + l] | ((qh << (8 - 2 * l)) & 0x300)];
            const uint s = b[34 + 4 * ib + l];
            grid8_signed(g, s, db, y + 8 * h);
        }
    }
};

// IQ3_XXS: d, qs[64] (grid indices of 4 values), per 32-value group a word of four 7-bit
// sign indices and a 4-bit scale.
struct fmt_iq3_xxs {
    enum { QK = 256, BYTES = 98 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq3_xxs)
        const int ib = il / 2;
        const uint aux = ld_u32(b + 66 + 4 * ib);
        const float db = ld_half(b) * (0.5f + float(aux >> 28)) * 0.5f;
        device const uchar * q = b + 2 + 8 * ib;
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            const uint s = ksigns_iq2xs[(aux >> (7 * l)) & 127];
            constant uchar * g1 = iq3xxs_grid[q[2 * l]];
            constant uchar * g2 = iq3xxs_grid[q[2 * l + 1]];
            grid44_signed(g1, g2, s, db, y + 8 * h);
        }
    }
};

// IQ3_S: d, qs[64], qh[8] (ninth index bits), signs[32], scales[4] (4 bits per group).
struct fmt_iq3_s {
    enum { QK = 256, BYTES = 110 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq3_s)
        const int ib = il / 2;
        const uint sc = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
        const float db = ld_half(b) * float(1 + 2 * int(sc));
        device const uchar * q = b + 2 + 8 * ib;
        const uint qh = b[66 + ib];
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            constant uchar * g1 = iq3s_grid[q[2 * l] | ((qh << (8 - 2 * l)) & 256)];
            constant uchar * g2 = iq3s_grid[q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
            const uint s = b[74 + 4 * ib + l];
            grid44_signed(g1, g2, s, db, y + 8 * h);
        }
    }
};

// IQ1_S: d, qs[32] (grid index low bits), qh[8] words (per group of 32: 3 index bits per 8
// values, a 3-bit scale, the delta's sign).
struct fmt_iq1_s {
    enum { QK = 256, BYTES = 50 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq1_s)
        const int ib = il / 2;
        const uint qh = ld_u16(b + 34 + 2 * ib);
        const float dl = ld_half(b) * float(2 * ((qh >> 12) & 7) + 1);
        const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
        for (int h = 0; h < 2; h++) {
            const int l = 2 * (il % 2) + h;
            constant uchar * g = iq1s_grid[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
            grid8_delta(g, delta, dl, y + 8 * h);
        }
    }
};

// IQ1_M: qs[32] (grid index low bits), qh[16] (per pair of groups: 3 index bits and a delta
// sign each), scales (4 words: 3-bit group scales, the f16 block scale in their top nibbles).
// A chunk is two groups that share one qh byte and one 3-bit scale: they are read once
// (Red Lite's "two groups per thread").
struct fmt_iq1_m {
    enum { QK = 256, BYTES = 56 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq1_m)
        const int ib = il / 2, p = il % 2;
        const uint s0 = ld_u16(b + 48), s1 = ld_u16(b + 50), s2 = ld_u16(b + 52), s3 = ld_u16(b + 54);
        const ushort dbits = ushort((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
        const float d = float(as_type<half>(dbits));
        const uint sw = ld_u16(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
        const float dl = d * float(2 * ((sw >> (3 * p)) & 7) + 1);
        const uint h = b[32 + 2 * ib + p];
        const uint idx0 = b[4 * ib + 2 * p] | ((h << 8) & 0x700);
        const uint idx1 = b[4 * ib + 2 * p + 1] | ((h << 4) & 0x700);
        const float delta0 = (h & 0x08) ? -0.125f : 0.125f;
        const float delta1 = (h & 0x80) ? -0.125f : 0.125f;
        constant uchar * g0 = iq1s_grid[idx0];
        constant uchar * g1 = iq1s_grid[idx1];
        grid8_delta(g0, delta0, dl, y);
        grid8_delta(g1, delta1, dl, y + 8);
    }
};

// IQ4_XS: d, scales_h (2 high bits per group), scales_l[4] (4 low bits per group), qs[128]:
// group ib holds low nibbles then high nibbles of qs[16ib..16ib+16), levels kvalues_iq4nl.
struct fmt_iq4_xs {
    enum { QK = 256, BYTES = 136 };
    static inline void deq16(device const uchar * row, int c, int cols, thread float * y) {
        CHUNK_BLOCK(fmt_iq4_xs)
        const int ib = il / 2;
        const uint sh = ld_u16(b + 2);
        const int ls = int(((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4));
        const float dl = ld_half(b) * float(ls - 32);
        device const uchar * q = b + 8 + 16 * ib;
        const int shift = 4 * (il % 2);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * kvalues_iq4nl[(q[j] >> shift) & 0xf];
        }
    }
};


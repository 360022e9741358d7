//go:build arm64 && !purego

#include "textflag.h"
#include "neon_arm64.h"

// NEON kernels for the quantized dot products. Each computes out[r] for nrows contiguous
// rows of nblocks blocks against the same x, in exactly the order of operations of the Go
// kernel of dot.go as the Go compiler builds it for arm64 (where a += b*c is one fused
// multiply-add), so that both give the same bits. nblocks and nrows are at least 1.

// Q8_0 block (34 bytes): f16 d, 32 × int8. As dotQ8_0Go: lane i of an accumulator sums
// q[j]·x[j] for j ≡ i mod 4 in j order, the lanes fold as (s0+s1)+(s2+s3), and the row
// total takes d·fold with one fused multiply-add.
// Q80CONV widens the 32 int8 of V0, V1 to floats in V6-V13.
#define Q80CONV \
	SXTL8H(2, 0); \
	SXTL28H(3, 0); \
	SXTL8H(4, 1); \
	SXTL28H(5, 1); \
	SXTL4S(6, 2); \
	SXTL24S(7, 2); \
	SXTL4S(8, 3); \
	SXTL24S(9, 3); \
	SXTL4S(10, 4); \
	SXTL24S(11, 4); \
	SXTL4S(12, 5); \
	SXTL24S(13, 5); \
	SCVTF4S(6, 6); \
	SCVTF4S(7, 7); \
	SCVTF4S(8, 8); \
	SCVTF4S(9, 9); \
	SCVTF4S(10, 10); \
	SCVTF4S(11, 11); \
	SCVTF4S(12, 12); \
	SCVTF4S(13, 13)

// func dotQ8_0RowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)
TEXT ·dotQ8_0RowsNEON(SB), NOSPLIT, $0-40
	MOVD rows+0(FP), R0
	MOVD x+8(FP), R1
	MOVD nblocks+16(FP), R2
	MOVD nrows+24(FP), R3
	MOVD out+32(FP), R4

q80row:
	MOVD  R1, R5
	MOVD  R2, R6
	FMOVS ZR, F30

q80block:
	MOVHU.P 2(R0), R7
	FMOVS   R7, F29
	FCVTHS  F29, F29
	VLD1.P  32(R0), [V0.B16, V1.B16]
	VLD1.P  64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P  64(R5), [V20.S4, V21.S4, V22.S4, V23.S4]
	Q80CONV
	VEOR    V24.B16, V24.B16, V24.B16
	FMLA4S(24, 6, 16)
	FMLA4S(24, 7, 17)
	FMLA4S(24, 8, 18)
	FMLA4S(24, 9, 19)
	FMLA4S(24, 10, 20)
	FMLA4S(24, 11, 21)
	FMLA4S(24, 12, 22)
	FMLA4S(24, 13, 23)
	FADDP4S(25, 24, 24)
	FADDP2S(25, 25)
	FMADDS  F25, F30, F29, F30
	SUBS    $1, R6
	BNE     q80block

	FMOVS.P F30, 4(R4)
	SUBS    $1, R3
	BNE     q80row
	RET

// Q80TOKEN adds token T's dot with the converted block V6-V13 to its total F: x at (X).
#define Q80TOKEN(X, F) \
	VLD1.P 64(X), [V16.S4, V17.S4, V18.S4, V19.S4]; \
	VLD1.P 64(X), [V20.S4, V21.S4, V22.S4, V23.S4]; \
	VEOR   V24.B16, V24.B16, V24.B16; \
	FMLA4S(24, 6, 16); \
	FMLA4S(24, 7, 17); \
	FMLA4S(24, 8, 18); \
	FMLA4S(24, 9, 19); \
	FMLA4S(24, 10, 20); \
	FMLA4S(24, 11, 21); \
	FMLA4S(24, 12, 22); \
	FMLA4S(24, 13, 23); \
	FADDP4S(25, 24, 24); \
	FADDP2S(25, 25); \
	FMADDS F25, F, F29, F

// dotQ8_0Rows4NEON is dotQ8_0RowsNEON for four tokens at once (x, x+xstride, … floats;
// out, out+ostride, …): each block is converted once for the four, and each token's total
// is computed exactly as dotQ8_0RowsNEON computes it alone.
// func dotQ8_0Rows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)
TEXT ·dotQ8_0Rows4NEON(SB), NOSPLIT, $0-56
	MOVD rows+0(FP), R0
	MOVD x+8(FP), R1
	MOVD xstride+16(FP), R14
	MOVD nblocks+24(FP), R2
	MOVD nrows+32(FP), R3
	MOVD out+40(FP), R4
	MOVD ostride+48(FP), R15
	LSL  $2, R14
	LSL  $2, R15
	ADD  R15, R4, R11
	ADD  R15, R11, R12
	ADD  R15, R12, R13

q80x4row:
	MOVD  R1, R5
	ADD   R14, R5, R8
	ADD   R14, R8, R9
	ADD   R14, R9, R10
	MOVD  R2, R6
	FMOVS ZR, F26
	FMOVS ZR, F27
	FMOVS ZR, F28
	FMOVS ZR, F30

q80x4block:
	MOVHU.P 2(R0), R7
	FMOVS   R7, F29
	FCVTHS  F29, F29
	VLD1.P  32(R0), [V0.B16, V1.B16]
	Q80CONV
	Q80TOKEN(R5, F26)
	Q80TOKEN(R8, F27)
	Q80TOKEN(R9, F28)
	Q80TOKEN(R10, F30)
	SUBS    $1, R6
	BNE     q80x4block

	FMOVS.P F26, 4(R4)
	FMOVS.P F27, 4(R11)
	FMOVS.P F28, 4(R12)
	FMOVS.P F30, 4(R13)
	SUBS    $1, R3
	BNE     q80x4row
	RET

// Q4_K super-block (144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128
// bytes of nibbles; byte l of 32-byte chunk j holds element 64j+l (low nibble, sub-block
// 2j) and 64j+32+l (high nibble, sub-block 2j+1). As dotQ4_KGo: per chunk, four
// accumulators (Σq·x and Σx for either nibble) with lane i summing l ≡ i mod 4; then
// A += (d·sc)·Σq·x, A −= (dmin·m)·Σx for the low sub-block, B likewise for the high one.
// The sums Σx depend on x only: q4kSumsNEON makes them once for all the rows of a call.
//
// Registers: V20..V23 the chunk's sums, V24 A, V25 B, V26/V27 d·sc for sub-blocks 0-3/4-7,
// V29/V30 dmin·m, V31 the nibble mask.

// Q4KSTEP converts 16 nibbles (8 in each of H0, H1 as halfwords), loads their 16 x and
// adds their products to PQ.
#define Q4KSTEP(H0, H1, PQ) \
	UXTL4S(12, H0); \
	UXTL24S(13, H0); \
	UXTL4S(14, H1); \
	UXTL24S(15, H1); \
	UCVTF4S(12, 12); \
	UCVTF4S(13, 13); \
	UCVTF4S(14, 14); \
	UCVTF4S(15, 15); \
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]; \
	FMLA4S(PQ, 12, 16); \
	FMLA4S(PQ, 13, 17); \
	FMLA4S(PQ, 14, 18); \
	FMLA4S(PQ, 15, 19)

// Q4KCHUNK does chunk j, whose sub-blocks' scales are lanes LO and LO+1 of DS and DM.
#define Q4KCHUNK(DS, DM, LO) \
	VLD1.P 32(R0), [V0.B16, V1.B16]; \
	VAND   V31.B16, V0.B16, V2.B16; \
	VAND   V31.B16, V1.B16, V3.B16; \
	VUSHR  $4, V0.B16, V0.B16; \
	VUSHR  $4, V1.B16, V1.B16; \
	UXTL8H(4, 2); \
	UXTL28H(5, 2); \
	UXTL8H(6, 3); \
	UXTL28H(7, 3); \
	UXTL8H(8, 0); \
	UXTL28H(9, 0); \
	UXTL8H(10, 1); \
	UXTL28H(11, 1); \
	VEOR   V20.B16, V20.B16, V20.B16; \
	VEOR   V21.B16, V21.B16, V21.B16; \
	VLD1.P 32(R19), [V22.S4, V23.S4]; \
	Q4KSTEP(4, 5, 20); \
	Q4KSTEP(6, 7, 20); \
	Q4KSTEP(8, 9, 21); \
	Q4KSTEP(10, 11, 21); \
	FMLAE(24, 20, DS, LO); \
	FMLSE(24, 22, DM, LO); \
	FMLAE(25, 21, DS, LO+1); \
	FMLSE(25, 23, DM, LO+1)

// Q4KSCALES reads a block's d, dmin and 6-bit scales and mins at R0 (advancing it 16 bytes)
// and leaves d·sc in vectors SC03 (sub-blocks 0-3) and SC47, dmin·m in MN03 and MN47; d and
// dmin are lanes 0 and 1 of vector DV (FDV is its name as an F register). Bytes 0-7 go to
// B07 (sc0-3, m0-3 in their low 6 bits), bytes 8-11 to B811; sc4-7 and m4-7 take their low
// 4 bits from bytes 8-11 and their high 2 from the top bits of bytes 0-7. T0, T1 are
// scratch (T1 may be R7); M3F, M03, M0F hold the byte masks 0x3f.., 0x03.., 0x0f...
#define Q4KSCALES(FDV, DV, B07, B811, T0, T1, M3F, M03, M0F, SC03, SC47, MN03, MN47) \
	MOVWU.P 4(R0), R7; \
	FMOVS   R7, FDV; \
	FCVTL4S(DV, DV); \
	MOVD.P  8(R0), B07; \
	MOVWU.P 4(R0), B811; \
	LSR     $6, B07, T0; \
	AND     M03, T0, T0; \
	LSL     $4, T0, T0; \
	LSR     $4, B811, T1; \
	ORR     T1<<32, B811, T1; \
	AND     M0F, T1, T1; \
	ORR     T0, T1, T1; \
	AND     M3F, B07, B07; \
	VMOV    B07, V12.D[0]; \
	VMOV    T1, V12.D[1]; \
	UXTL8H(13, 12); \
	UXTL28H(14, 12); \
	UXTL4S(SC03, 13); \
	UXTL24S(MN03, 13); \
	UXTL4S(SC47, 14); \
	UXTL24S(MN47, 14); \
	UCVTF4S(SC03, SC03); \
	UCVTF4S(MN03, MN03); \
	UCVTF4S(SC47, SC47); \
	UCVTF4S(MN47, MN47); \
	FMULE(SC03, SC03, DV, 0); \
	FMULE(SC47, SC47, DV, 0); \
	FMULE(MN03, MN03, DV, 1); \
	FMULE(MN47, MN47, DV, 1)

// q4kSumsNEON writes, per block of x and chunk j, the 4-lane sums Σx of the low and the
// high sub-block, in the lane order of dotQ4_KGo's sums, stride bytes apart (16: one pair
// after another; 64: room for four tokens' sums side by side).
// func q4kSumsNEON(x *float32, nblocks int, sums *float32, stride int)
TEXT ·q4kSumsNEON(SB), NOSPLIT, $0-32
	MOVD x+0(FP), R5
	MOVD nblocks+8(FP), R6
	MOVD sums+16(FP), R7
	MOVD stride+24(FP), R8
	LSL  $2, R6

q4ksums:
	VEOR   V22.B16, V22.B16, V22.B16
	VEOR   V23.B16, V23.B16, V23.B16
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	FADD4S(22, 22, 16)
	FADD4S(22, 22, 17)
	FADD4S(22, 22, 18)
	FADD4S(22, 22, 19)
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	FADD4S(22, 22, 16)
	FADD4S(22, 22, 17)
	FADD4S(22, 22, 18)
	FADD4S(22, 22, 19)
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	FADD4S(23, 23, 16)
	FADD4S(23, 23, 17)
	FADD4S(23, 23, 18)
	FADD4S(23, 23, 19)
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]
	FADD4S(23, 23, 16)
	FADD4S(23, 23, 17)
	FADD4S(23, 23, 18)
	FADD4S(23, 23, 19)
	VST1.P [V22.S4], (R7)(R8)
	VST1.P [V23.S4], (R7)(R8)
	SUBS   $1, R6
	BNE    q4ksums
	RET

// func dotQ4_KRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32, sums *float32)
TEXT ·dotQ4_KRowsNEON(SB), NOSPLIT, $0-48
	MOVD  rows+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  nblocks+16(FP), R2
	MOVD  nrows+24(FP), R3
	MOVD  out+32(FP), R4
	MOVD  sums+40(FP), R20
	VMOVI $0x0f, V31.B16
	MOVD  $0x3f3f3f3f3f3f3f3f, R13
	MOVD  $0x0303030303030303, R14
	MOVD  $0x0f0f0f0f0f0f0f0f, R15

q4krow:
	MOVD R1, R5
	MOVD R20, R19
	MOVD R2, R6
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16

q4kblock:
	Q4KSCALES(F28, 28, R8, R9, R11, R10, R13, R14, R15, 26, 27, 29, 30)

	Q4KCHUNK(26, 29, 0)
	Q4KCHUNK(26, 29, 2)
	Q4KCHUNK(27, 30, 0)
	Q4KCHUNK(27, 30, 2)

	SUBS $1, R6
	BNE  q4kblock

	ROWSUM(0, 24, 25)
	FMOVS.P F0, 4(R4)
	SUBS    $1, R3
	BNE     q4krow
	RET

// Four tokens at once (DotRows4): each chunk's nibbles are converted once, then every
// token does what dotQ4_KRowsNEON does alone, in the same order, so each gets its own bits.
//
// Registers: V8-V11 the tokens' A, V27-V30 their B, V26 the chunk's [d·sc lo, d·sc hi,
// dmin·m lo, dmin·m hi] (the four chunks' are kept in the frame), V12-V19 32 converted
// nibbles, R5/R8/R9/R10 the tokens' x, R20 the sums (per chunk: the four tokens' low sums,
// then their high sums).

// Q4X4CONV widens the 32 nibbles of byte registers N0, N1 to floats in V12-V19.
#define Q4X4CONV(N0, N1) \
	UXTL8H(4, N0); \
	UXTL28H(5, N0); \
	UXTL8H(6, N1); \
	UXTL28H(7, N1); \
	UXTL4S(12, 4); \
	UXTL24S(13, 4); \
	UXTL4S(14, 5); \
	UXTL24S(15, 5); \
	UXTL4S(16, 6); \
	UXTL24S(17, 6); \
	UXTL4S(18, 7); \
	UXTL24S(19, 7); \
	UCVTF4S(12, 12); \
	UCVTF4S(13, 13); \
	UCVTF4S(14, 14); \
	UCVTF4S(15, 15); \
	UCVTF4S(16, 16); \
	UCVTF4S(17, 17); \
	UCVTF4S(18, 18); \
	UCVTF4S(19, 19)

// Q4X4TOK adds one token's sub-block (x at X) to ACC with scale lanes DSL and DML of V26.
#define Q4X4TOK(X, ACC, DSL, DML) \
	VEOR   V24.B16, V24.B16, V24.B16; \
	VLD1.P 64(X), [V20.S4, V21.S4, V22.S4, V23.S4]; \
	FMLA4S(24, 12, 20); \
	FMLA4S(24, 13, 21); \
	FMLA4S(24, 14, 22); \
	FMLA4S(24, 15, 23); \
	VLD1.P 64(X), [V20.S4, V21.S4, V22.S4, V23.S4]; \
	FMLA4S(24, 16, 20); \
	FMLA4S(24, 17, 21); \
	FMLA4S(24, 18, 22); \
	FMLA4S(24, 19, 23); \
	VLD1.P 16(R20), [V25.S4]; \
	FMLAE(ACC, 24, 26, DSL); \
	FMLSE(ACC, 25, 26, DML)

#define Q4X4CHUNK \
	VLD1.P 16(R7), [V26.S4]; \
	VLD1.P 32(R0), [V0.B16, V1.B16]; \
	VAND   V31.B16, V0.B16, V2.B16; \
	VAND   V31.B16, V1.B16, V3.B16; \
	VUSHR  $4, V0.B16, V0.B16; \
	VUSHR  $4, V1.B16, V1.B16; \
	Q4X4CONV(2, 3); \
	Q4X4TOK(R5, 8, 0, 2); \
	Q4X4TOK(R8, 9, 0, 2); \
	Q4X4TOK(R9, 10, 0, 2); \
	Q4X4TOK(R10, 11, 0, 2); \
	Q4X4CONV(0, 1); \
	Q4X4TOK(R5, 27, 1, 3); \
	Q4X4TOK(R8, 28, 1, 3); \
	Q4X4TOK(R9, 29, 1, 3); \
	Q4X4TOK(R10, 30, 1, 3)

// func dotQ4_KRows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int, sums *float32)
TEXT ·dotQ4_KRows4NEON(SB), NOSPLIT, $64-64
	MOVD  rows+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  xstride+16(FP), R14
	MOVD  nblocks+24(FP), R2
	MOVD  nrows+32(FP), R3
	MOVD  out+40(FP), R4
	MOVD  ostride+48(FP), R15
	MOVD  sums+56(FP), R19
	LSL   $2, R14
	LSL   $2, R15
	ADD   R15, R4, R11
	ADD   R15, R11, R12
	ADD   R15, R12, R13
	VMOVI $0x0f, V31.B16
	MOVD  $0x3f3f3f3f3f3f3f3f, R15
	MOVD  $0x0303030303030303, R21
	MOVD  $0x0f0f0f0f0f0f0f0f, R22

q4x4row:
	MOVD R1, R5
	ADD  R14, R5, R8
	ADD  R14, R8, R9
	ADD  R14, R9, R10
	MOVD R19, R20
	MOVD R2, R6
	VEOR V8.B16, V8.B16, V8.B16
	VEOR V9.B16, V9.B16, V9.B16
	VEOR V10.B16, V10.B16, V10.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V29.B16, V29.B16, V29.B16
	VEOR V30.B16, V30.B16, V30.B16

q4x4block:
	// d, dmin and the scales as in dotQ4_KRowsNEON, into V16 (d·sc 0-3), V17 (4-7), V18
	// (dmin·m 0-3), V19 (4-7), then per chunk into the frame.
	Q4KSCALES(F20, 20, R23, R24, R25, R7, R15, R21, R22, 16, 17, 18, 19)
	ZIP12D(12, 16, 18)
	ZIP22D(13, 16, 18)
	ZIP12D(14, 17, 19)
	ZIP22D(15, 17, 19)
	ADD     $8, RSP, R7
	VST1    [V12.S4, V13.S4, V14.S4, V15.S4], (R7)

	Q4X4CHUNK
	Q4X4CHUNK
	Q4X4CHUNK
	Q4X4CHUNK

	SUBS $1, R6
	BNE  q4x4block

	ROWSUM(0, 8, 27)
	FMOVS.P F0, 4(R4)
	ROWSUM(0, 9, 28)
	FMOVS.P F0, 4(R11)
	ROWSUM(0, 10, 29)
	FMOVS.P F0, 4(R12)
	ROWSUM(0, 11, 30)
	FMOVS.P F0, 4(R13)
	SUBS    $1, R3
	BNE     q4x4row
	RET

// Q6_K super-block (210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16
// int8 scales, f16 d. Quarter k of half n holds elements 128n+32k+l, l = 0..31: the low
// (k < 2) or high nibble of ql[64n+l+32·(k&1)] and bit pair k of qh[32n+l], biased by 32;
// each 16 share scale sc[8n+2k+l/16]. As dotQ6_KGo: per 16-element group a sum P whose
// lane i takes l ≡ i mod 4, then A (half 0) or B (half 1) += (d·sc)·P.
//
// Registers: V0-V3 the half's ql, V4/V5 its qh, V6/V7 one quarter's 6-bit values, V20-V23
// the 16 scales d·sc, V24 A, V25 B, V28 d, V29 0x0f, V30 0x30, V31 32 (bytes).

// Q6KGROUP adds the 16 values of byte register W (a number) times the next 16 x into ACC
// with scale lane LANE of DS.
#define Q6KGROUP(W, DS, LANE, ACC) \
	SXTL8H(8, W); \
	SXTL28H(9, W); \
	SXTL4S(12, 8); \
	SXTL24S(13, 8); \
	SXTL4S(14, 9); \
	SXTL24S(15, 9); \
	SCVTF4S(12, 12); \
	SCVTF4S(13, 13); \
	SCVTF4S(14, 14); \
	SCVTF4S(15, 15); \
	VLD1.P 64(R5), [V16.S4, V17.S4, V18.S4, V19.S4]; \
	VEOR   V26.B16, V26.B16, V26.B16; \
	FMLA4S(26, 12, 16); \
	FMLA4S(26, 13, 17); \
	FMLA4S(26, 14, 18); \
	FMLA4S(26, 15, 19); \
	FMLAE(ACC, 26, DS, LANE)

// Q6KQUARTER finishes quarter values in V6 and V7 (nibbles in place, qh bits at 4-5 in
// V27/V10), subtracts the bias and adds both groups.
#define Q6KQUARTER(DS, LANE, ACC) \
	VAND  V30.B16, V27.B16, V27.B16; \
	VAND  V30.B16, V10.B16, V10.B16; \
	VORR  V27.B16, V6.B16, V6.B16; \
	VORR  V10.B16, V7.B16, V7.B16; \
	VSUB  V31.B16, V6.B16, V6.B16; \
	VSUB  V31.B16, V7.B16, V7.B16; \
	Q6KGROUP(6, DS, LANE, ACC); \
	Q6KGROUP(7, DS, LANE+1, ACC)

// Q6KHALF does half n with ql at QL, qh at QH (byte offsets in the block), scales in DS0
// (quarters 0, 1) and DS1 (quarters 2, 3), into ACC.
#define Q6KHALF(QL, QH, DS0, DS1, ACC) \
	ADD   $QL, R0, R8; \
	ADD   $QH, R0, R9; \
	VLD1  (R8), [V0.B16, V1.B16, V2.B16, V3.B16]; \
	VLD1  (R9), [V4.B16, V5.B16]; \
	VAND  V29.B16, V0.B16, V6.B16; \
	VAND  V29.B16, V1.B16, V7.B16; \
	VSHL  $4, V4.B16, V27.B16; \
	VSHL  $4, V5.B16, V10.B16; \
	Q6KQUARTER(DS0, 0, ACC); \
	VAND  V29.B16, V2.B16, V6.B16; \
	VAND  V29.B16, V3.B16, V7.B16; \
	VSHL  $2, V4.B16, V27.B16; \
	VSHL  $2, V5.B16, V10.B16; \
	Q6KQUARTER(DS0, 2, ACC); \
	VUSHR $4, V0.B16, V6.B16; \
	VUSHR $4, V1.B16, V7.B16; \
	VMOV  V4.B16, V27.B16; \
	VMOV  V5.B16, V10.B16; \
	Q6KQUARTER(DS1, 0, ACC); \
	VUSHR $4, V2.B16, V6.B16; \
	VUSHR $4, V3.B16, V7.B16; \
	VUSHR $2, V4.B16, V27.B16; \
	VUSHR $2, V5.B16, V10.B16; \
	Q6KQUARTER(DS1, 2, ACC)

// func dotQ6_KRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)
TEXT ·dotQ6_KRowsNEON(SB), NOSPLIT, $0-40
	MOVD  rows+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  nblocks+16(FP), R2
	MOVD  nrows+24(FP), R3
	MOVD  out+32(FP), R4
	VMOVI $0x0f, V29.B16
	VMOVI $0x30, V30.B16
	VMOVI $32, V31.B16

q6krow:
	MOVD R1, R5
	MOVD R2, R6
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16

q6kblock:
	MOVHU  208(R0), R7
	FMOVS  R7, F28
	FCVTHS F28, F28
	ADD    $192, R0, R8
	VLD1   (R8), [V11.B16]
	SXTL8H(8, 11)
	SXTL28H(9, 11)
	SXTL4S(20, 8)
	SXTL24S(21, 8)
	SXTL4S(22, 9)
	SXTL24S(23, 9)
	SCVTF4S(20, 20)
	SCVTF4S(21, 21)
	SCVTF4S(22, 22)
	SCVTF4S(23, 23)
	FMULE(20, 20, 28, 0)
	FMULE(21, 21, 28, 0)
	FMULE(22, 22, 28, 0)
	FMULE(23, 23, 28, 0)

	Q6KHALF(0, 128, 20, 21, 24)
	Q6KHALF(64, 160, 22, 23, 25)

	ADD  $210, R0
	SUBS $1, R6
	BNE  q6kblock

	ROWSUM(0, 24, 25)
	FMOVS.P F0, 4(R4)
	SUBS    $1, R3
	BNE     q6krow
	RET

// Four tokens at once (DotRows4): each group's 16 values are converted once, then every
// token does what dotQ6_KRowsNEON does alone, in the same order.
//
// Registers: V0/V1 the quarter's ql, V4/V5 the half's qh, V6/V7 the quarter's values, V12-V15
// a group's values as floats, V16/V17 x, V20-V23 the scales d·sc, V26 the group sum, and the
// tokens' A in V2, V3, V11, V24 and B in V25, V27, V28, V18.

// Q6WK0..Q6WK3 build quarter k's values in W from nibble bytes L and qh bytes H.
#define Q6WK0(W, L, H) \
	VAND V29.B16, L.B16, W.B16; \
	VSHL $4, H.B16, V10.B16
#define Q6WK1(W, L, H) \
	VAND V29.B16, L.B16, W.B16; \
	VSHL $2, H.B16, V10.B16
#define Q6WK2(W, L, H) \
	VUSHR $4, L.B16, W.B16; \
	VMOV  H.B16, V10.B16
#define Q6WK3(W, L, H) \
	VUSHR $4, L.B16, W.B16; \
	VUSHR $2, H.B16, V10.B16

// Q6WFIN adds the qh bits in V10 to W and removes the bias.
#define Q6WFIN(W) \
	VAND V30.B16, V10.B16, V10.B16; \
	VORR V10.B16, W.B16, W.B16; \
	VSUB V31.B16, W.B16, W.B16

#define Q6X4TOK(X, ACC, DS, LANE) \
	VEOR   V26.B16, V26.B16, V26.B16; \
	VLD1.P 32(X), [V16.S4, V17.S4]; \
	FMLA4S(26, 12, 16); \
	FMLA4S(26, 13, 17); \
	VLD1.P 32(X), [V16.S4, V17.S4]; \
	FMLA4S(26, 14, 16); \
	FMLA4S(26, 15, 17); \
	FMLAE(ACC, 26, DS, LANE)

#define Q6X4GROUP(W, DS, LANE, A0, A1, A2, A3) \
	SXTL8H(8, W); \
	SXTL28H(9, W); \
	SXTL4S(12, 8); \
	SXTL24S(13, 8); \
	SXTL4S(14, 9); \
	SXTL24S(15, 9); \
	SCVTF4S(12, 12); \
	SCVTF4S(13, 13); \
	SCVTF4S(14, 14); \
	SCVTF4S(15, 15); \
	Q6X4TOK(R5, A0, DS, LANE); \
	Q6X4TOK(R8, A1, DS, LANE); \
	Q6X4TOK(R9, A2, DS, LANE); \
	Q6X4TOK(R10, A3, DS, LANE)

// Q6X4QUARTER does quarter K (macro Q6WK), ql at byte QL of the block, with scale lanes
// LANE and LANE+1 of DS.
#define Q6X4QUARTER(WK, QL, DS, LANE, A0, A1, A2, A3) \
	ADD  $QL, R0, R7; \
	VLD1 (R7), [V0.B16, V1.B16]; \
	WK(V6, V0, V4); \
	Q6WFIN(V6); \
	WK(V7, V1, V5); \
	Q6WFIN(V7); \
	Q6X4GROUP(6, DS, LANE, A0, A1, A2, A3); \
	Q6X4GROUP(7, DS, LANE+1, A0, A1, A2, A3)

#define Q6X4HALF(QL, QH, DS0, DS1, A0, A1, A2, A3) \
	ADD  $QH, R0, R7; \
	VLD1 (R7), [V4.B16, V5.B16]; \
	Q6X4QUARTER(Q6WK0, QL, DS0, 0, A0, A1, A2, A3); \
	Q6X4QUARTER(Q6WK1, QL+32, DS0, 2, A0, A1, A2, A3); \
	Q6X4QUARTER(Q6WK2, QL, DS1, 0, A0, A1, A2, A3); \
	Q6X4QUARTER(Q6WK3, QL+32, DS1, 2, A0, A1, A2, A3)

// func dotQ6_KRows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)
TEXT ·dotQ6_KRows4NEON(SB), NOSPLIT, $0-56
	MOVD  rows+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  xstride+16(FP), R14
	MOVD  nblocks+24(FP), R2
	MOVD  nrows+32(FP), R3
	MOVD  out+40(FP), R4
	MOVD  ostride+48(FP), R15
	LSL   $2, R14
	LSL   $2, R15
	ADD   R15, R4, R11
	ADD   R15, R11, R12
	ADD   R15, R12, R13
	VMOVI $0x0f, V29.B16
	VMOVI $0x30, V30.B16
	VMOVI $32, V31.B16

q6x4row:
	MOVD R1, R5
	ADD  R14, R5, R8
	ADD  R14, R8, R9
	ADD  R14, R9, R10
	MOVD R2, R6
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V18.B16, V18.B16, V18.B16

q6x4block:
	MOVHU  208(R0), R7
	FMOVS  R7, F19
	FCVTHS F19, F19
	ADD    $192, R0, R7
	VLD1   (R7), [V26.B16]
	SXTL8H(8, 26)
	SXTL28H(9, 26)
	SXTL4S(20, 8)
	SXTL24S(21, 8)
	SXTL4S(22, 9)
	SXTL24S(23, 9)
	SCVTF4S(20, 20)
	SCVTF4S(21, 21)
	SCVTF4S(22, 22)
	SCVTF4S(23, 23)
	FMULE(20, 20, 19, 0)
	FMULE(21, 21, 19, 0)
	FMULE(22, 22, 19, 0)
	FMULE(23, 23, 19, 0)

	Q6X4HALF(0, 128, 20, 21, 2, 3, 11, 24)
	Q6X4HALF(64, 160, 22, 23, 25, 27, 28, 18)

	ADD  $210, R0
	SUBS $1, R6
	BNE  q6x4block

	ROWSUM(0, 2, 25)
	FMOVS.P F0, 4(R4)
	ROWSUM(0, 3, 27)
	FMOVS.P F0, 4(R11)
	ROWSUM(0, 11, 28)
	FMOVS.P F0, 4(R12)
	ROWSUM(0, 24, 18)
	FMOVS.P F0, 4(R13)
	SUBS    $1, R3
	BNE     q6x4row
	RET

// IQ2_XXS super-block (66 bytes): f16 d, then per 32 elements ib two words: four grid
// indices (8 elements each) and aux, whose bits 7l..7l+6 pick the sign pattern of grid
// point l and whose top 4 bits are the scale. As dotIQ2_XXSGo: per ib, sums S0 (elements
// 0-3 of each grid point) and S1 (4-7) of grid·(±x), then A += t·S0, B += t·S1 with
// t = d·(0.5+scale)·0.25.
//
// Registers: R10 the float grid, R11 the sign masks, V21/V23 t for ib 0-3/4-7, V24 A,
// V25 B, V26 S0, V27 S1, V28 d, V29 0.5, V30 0.25.

// IQ2L does grid point L of the current ib (index and aux words in R9).
#define IQ2L(L) \
	UBFX   $(8*L), R9, $8, R12; \
	ADD    R12<<5, R10, R12; \
	VLD1   (R12), [V0.S4, V1.S4]; \
	UBFX   $(32+7*L), R9, $7, R13; \
	ADD    R13<<5, R11, R13; \
	VLD1   (R13), [V2.S4, V3.S4]; \
	VLD1.P 32(R5), [V4.S4, V5.S4]; \
	VEOR   V2.B16, V4.B16, V4.B16; \
	VEOR   V3.B16, V5.B16, V5.B16; \
	FMLA4S(26, 0, 4); \
	FMLA4S(27, 1, 5)

#define IQ2IB(T, LANE) \
	MOVD.P 8(R0), R9; \
	VEOR   V26.B16, V26.B16, V26.B16; \
	VEOR   V27.B16, V27.B16, V27.B16; \
	IQ2L(0); \
	IQ2L(1); \
	IQ2L(2); \
	IQ2L(3); \
	FMLAE(24, 26, T, LANE); \
	FMLAE(25, 27, T, LANE)

// func dotIQ2_XXSRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)
TEXT ·dotIQ2_XXSRowsNEON(SB), NOSPLIT, $0-40
	MOVD  rows+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  nblocks+16(FP), R2
	MOVD  nrows+24(FP), R3
	MOVD  out+32(FP), R4
	MOVD  $·iq2xxsGridF32(SB), R10
	MOVD  $·iqSignMask(SB), R11
	FMOVS $0.5, F29
	VDUP  V29.S[0], V29.S4
	FMOVS $0.25, F30
	VDUP  V30.S[0], V30.S4

iq2row:
	MOVD R1, R5
	MOVD R2, R6
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16

iq2block:
	MOVHU.P 2(R0), R7
	FMOVS   R7, F28
	FCVTHS  F28, F28

	// t for the eight ib: the aux words are the odd words of qs.
	ADD   $32, R0, R8
	VLD2  (R0), [V20.S4, V21.S4]
	VLD2  (R8), [V22.S4, V23.S4]
	VUSHR $28, V21.S4, V21.S4
	VUSHR $28, V23.S4, V23.S4
	UCVTF4S(21, 21)
	UCVTF4S(23, 23)
	FADD4S(21, 29, 21)
	FADD4S(23, 29, 23)
	FMULE(21, 21, 28, 0)
	FMULE(23, 23, 28, 0)
	FMUL4S(21, 21, 30)
	FMUL4S(23, 23, 30)

	IQ2IB(21, 0)
	IQ2IB(21, 1)
	IQ2IB(21, 2)
	IQ2IB(21, 3)
	IQ2IB(23, 0)
	IQ2IB(23, 1)
	IQ2IB(23, 2)
	IQ2IB(23, 3)

	SUBS $1, R6
	BNE  iq2block

	ROWSUM(0, 24, 25)
	FMOVS.P F0, 4(R4)
	SUBS    $1, R3
	BNE     iq2row
	RET

// Q8_0 weights against Q8_0-quantized activations (the int8 experiment of
// BenchmarkDotQ8_0Int8Act): per block the exact integer Σ w·a, then as dotQ8_0Q8_0Go the
// row total += (dw·da)·float32(Σ) with one fused multiply-add. The integer sum is exact in
// any order, so SDOT and the widening multiplies give the same bits.

// Q8Q8SCALE puts dw·da in F29 and advances R0 and R1 to the quants.
#define Q8Q8SCALE \
	MOVHU.P 2(R0), R7; \
	MOVHU.P 2(R1), R8; \
	FMOVS   R7, F29; \
	FMOVS   R8, F28; \
	FCVTHS  F29, F29; \
	FCVTHS  F28, F28; \
	FMULS   F28, F29, F29

// Q8Q8TOTAL adds (dw·da)·float32(Σ lanes of V4) to F30.
#define Q8Q8TOTAL \
	ADDV4S(5, 4); \
	SCVTFS(5, 5); \
	FMADDS  F5, F30, F29, F30

// func dotQ8_0Q8_0SDOT(w, a *byte, nblocks int) float32
TEXT ·dotQ8_0Q8_0SDOT(SB), NOSPLIT, $0-28
	MOVD  w+0(FP), R0
	MOVD  a+8(FP), R1
	MOVD  nblocks+16(FP), R2
	FMOVS ZR, F30

q8q8sdot:
	Q8Q8SCALE
	VLD1.P 32(R0), [V0.B16, V1.B16]
	VLD1.P 32(R1), [V2.B16, V3.B16]
	VEOR   V4.B16, V4.B16, V4.B16
	SDOT4S(4, 0, 2)
	SDOT4S(4, 1, 3)
	Q8Q8TOTAL
	SUBS   $1, R2
	BNE    q8q8sdot

	FMOVS F30, ret+24(FP)
	RET

// func dotQ8_0Q8_0NEON(w, a *byte, nblocks int) float32
TEXT ·dotQ8_0Q8_0NEON(SB), NOSPLIT, $0-28
	MOVD  w+0(FP), R0
	MOVD  a+8(FP), R1
	MOVD  nblocks+16(FP), R2
	FMOVS ZR, F30

q8q8neon:
	Q8Q8SCALE
	VLD1.P 32(R0), [V0.B16, V1.B16]
	VLD1.P 32(R1), [V2.B16, V3.B16]
	SMULL8H(6, 0, 2)
	SMULL28H(7, 0, 2)
	SMULL8H(16, 1, 3)
	SMULL28H(17, 1, 3)
	VEOR   V4.B16, V4.B16, V4.B16
	SADALP4S(4, 6)
	SADALP4S(4, 7)
	SADALP4S(4, 16)
	SADALP4S(4, 17)
	Q8Q8TOTAL
	SUBS   $1, R2
	BNE    q8q8neon

	FMOVS F30, ret+24(FP)
	RET

//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of the 8-bit activation path: weights widened to bytes in registers and
// multiplied with the int8 activations by VPMADDUBSW (unsigned weight × signed activation,
// pairs summed to int16), the int16 sums scaled by the sub-block scales with VPMADDWD, and
// one float conversion per block. The weight side must be the unsigned operand, so signed
// formats are biased to unsigned and the bias is taken back with the activations' group
// sums (Q8K.Bsums).
//
// Q8K layout: D float32 at 0, Qs [256]int8 at 4, Bsums [16]int16 at 260, Sums [8]float32 at
// 292; 324 bytes.

#define Q8K_SIZE 324
#define Q8K_SUMS 292

// Reduce the eight floats of Y0 to X0's low lane.
#define HSUM0 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VHADDPS      X0, X0, X0

// SCALEF16(off, xreg): xreg's low lane = half at off(SI) · Q8K.D at 0(DI).
#define SCALEF16(off, xreg) \
	MOVWLZX   off(SI), AX; \
	VMOVD     AX, xreg; \
	VCVTPH2PS xreg, xreg; \
	VMULSS    0(DI), xreg, xreg

// Q4_K block (144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
// nibbles (chunk j of 32 bytes: low nibbles are elements 64j…64j+31, high ones the next 32).
// value = d·sc·q − dmin·m, so Σ value·a = d·D·Σ_j sc_j·Σ q·a − Σ_j (dmin·m_j)·Sums_j: the
// integer part per sub-block scale, the mins part as one float product of eight lanes with
// the activations' Sums (D · each 32-group's sum).
//
// Frame: 0(SP) the eight scales as int16, for VPBROADCASTW.

// Q4KSCALES: the block at SI's scales as int16 to 0(SP), and dmin·m_j as floats in Y12;
// clobbers AX, BX, DX, R14, Y13. Bytewise: sc0..3 = u0&0x3f, sc4..7 = u2&0x0f | (u0>>2)&0x30,
// m0..3 = u1&0x3f, m4..7 = (u2>>4)&0x0f | (u1>>2)&0x30.
#define Q4KSCALES \
	MOVL         4(SI), AX; \
	MOVL         12(SI), DX; \
	MOVL         AX, R14; \
	SHRL         $2, R14; \
	ANDL         $0x30303030, R14; \
	MOVL         DX, BX; \
	ANDL         $0x0f0f0f0f, BX; \
	ORL          R14, BX; \
	ANDL         $0x3f3f3f3f, AX; \
	VMOVD        AX, X12; \
	VPINSRD      $1, BX, X12, X12; \
	VPMOVZXBW    X12, X12; \
	VMOVDQU      X12, 0(SP); \
	MOVL         8(SI), AX; \
	SHRL         $4, DX; \
	ANDL         $0x0f0f0f0f, DX; \
	MOVL         AX, R14; \
	SHRL         $2, R14; \
	ANDL         $0x30303030, R14; \
	ORL          R14, DX; \
	ANDL         $0x3f3f3f3f, AX; \
	VMOVD        AX, X12; \
	VPINSRD      $1, DX, X12, X12; \
	VPMOVZXBD    X12, Y12; \
	VCVTDQ2PS    Y12, Y12; \
	MOVWLZX      2(SI), AX; \
	VMOVD        AX, X13; \
	VCVTPH2PS    X13, X13; \
	VBROADCASTSS X13, Y13; \
	VMULPS       Y13, Y12, Y12

// Q4KNIBBLES(J): chunk J's low nibbles in Y4, high ones in Y5, their scales in Y6 and Y7.
#define Q4KNIBBLES(J) \
	VMOVDQU      (16+32*J)(SI), Y4; \
	VPSRLW       $4, Y4, Y5; \
	VPAND        Y15, Y4, Y4; \
	VPAND        Y15, Y5, Y5; \
	VPBROADCASTW (4*J)(SP), Y6; \
	VPBROADCASTW (4*J+2)(SP), Y7

// Q4KTOKEN(P, J, ACC): token P's 64 elements of chunk J into ACC (int32 lanes).
#define Q4KTOKEN(P, J, ACC) \
	VPMADDUBSW (4+64*J)(P), Y4, Y8; \
	VPMADDUBSW (36+64*J)(P), Y5, Y9; \
	VPMADDWD   Y6, Y8, Y8; \
	VPMADDWD   Y7, Y9, Y9; \
	VPADDD     Y8, ACC, ACC; \
	VPADDD     Y9, ACC, ACC

// Q4KSUM(P, ACC, F): F += ACC as floats · (d · token P's D); X14 holds d as float.
#define Q4KSUM(P, ACC, F) \
	VCVTDQ2PS    ACC, ACC; \
	VMULSS       0(P), X14, X13; \
	VBROADCASTSS X13, Y13; \
	VFMADD231PS  Y13, ACC, F

// Q4KSUM4 is Q4KSUM with d in X4.
#define Q4KSUM4(P, ACC, F) \
	VCVTDQ2PS    ACC, ACC; \
	VMULSS       0(P), X4, X13; \
	VBROADCASTSS X13, Y13; \
	VFMADD231PS  Y13, ACC, F

// Q4KD: the block's d as float in X14.
#define Q4KD \
	MOVWLZX   0(SI), AX; \
	VMOVD     AX, X14; \
	VCVTPH2PS X14, X14

// HSUM(F, X): F's eight lanes summed into X's low lane (X is F's low half).
#define HSUM(F, X) \
	VEXTRACTF128 $1, F, X13; \
	VADDPS       X13, X, X; \
	VHADDPS      X, X, X; \
	VHADDPS      X, X, X

// func dotQ4_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)
TEXT ·dotQ4_KQ8KAVX2(SB), NOSPLIT, $16-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Y0, Y0, Y0

block:
	PREFETCHT0   1024(SI)
	PREFETCHT0   1088(SI)
	Q4KSCALES
	VFNMADD231PS Q8K_SUMS(DI), Y12, Y0
	VPXOR        Y1, Y1, Y1
	Q4KNIBBLES(0)
	Q4KTOKEN(DI, 0, Y1)
	Q4KNIBBLES(1)
	Q4KTOKEN(DI, 1, Y1)
	Q4KNIBBLES(2)
	Q4KTOKEN(DI, 2, Y1)
	Q4KNIBBLES(3)
	Q4KTOKEN(DI, 3, Y1)
	Q4KD
	Q4KSUM(DI, Y1, Y0)

	ADDQ $144, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  block

	HSUM(Y0, X0)
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    row
	VZEROUPPER
	RET

// Q6_K block (210 bytes): 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d. In half n
// (128 elements), element 32k + l (k = 0..3, l = 0..31) is ql[64n + l] (k even) or
// ql[64n + 32 + l] (k odd), low nibble for k < 2 and high for k ≥ 2, with bits 2k, 2k+1
// of qh[32n + l] above it; minus 32. Its scale is sc[8n + 2k + l/16]. The unsigned q
// (0..63) goes into VPMADDUBSW and 32·Σ_g sc_g·Bsums_g is subtracted at the end.

// Q6KPART(K, DOFF): part K of the half, its nibbles already in Y6 (qh in Y10, scales in
// Y11), into Y1.
#define Q6KPART(K, DOFF) \
	VPSRLW     $(2*K), Y10, Y7; \
	VPAND      Y14, Y7, Y7; \
	VPSLLW     $4, Y7, Y7; \
	VPOR       Y7, Y6, Y6; \
	VPMADDUBSW DOFF(DI), Y6, Y6; \
	VPSHUFB    q6kShuf<>+(32*K)(SB), Y11, Y7; \
	VPMADDWD   Y7, Y6, Y6; \
	VPADDD     Y6, Y1, Y1

// Q6KHALF(N): half N of the block at SI into Y1.
#define Q6KHALF(N) \
	VMOVDQU     (64*N)(SI), Y8; \
	VMOVDQU     (64*N+32)(SI), Y9; \
	VMOVDQU     (128+32*N)(SI), Y10; \
	VPMOVSXBW   (192+8*N)(SI), X11; \
	VINSERTI128 $1, X11, Y11, Y11; \
	VPAND       Y15, Y8, Y6; \
	Q6KPART(0, 4+128*N); \
	VPAND       Y15, Y9, Y6; \
	Q6KPART(1, 36+128*N); \
	VPSRLW      $4, Y8, Y6; \
	VPAND       Y15, Y6, Y6; \
	Q6KPART(2, 68+128*N); \
	VPSRLW      $4, Y9, Y6; \
	VPAND       Y15, Y6, Y6; \
	Q6KPART(3, 100+128*N)

// func dotQ6_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)
TEXT ·dotQ6_KQ8KAVX2(SB), NOSPLIT, $0-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x03030303, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q6row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Y0, Y0, Y0

q6block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	VPXOR Y1, Y1, Y1
	Q6KHALF(0)
	Q6KHALF(1)
	// The bias: 32·Σ_g sc_g·Bsums_g.
	VPMOVSXBW    192(SI), Y8
	VPMADDWD     260(DI), Y8, Y8
	VPSLLD       $5, Y8, Y8
	VPSUBD       Y8, Y1, Y1
	VCVTDQ2PS    Y1, Y1
	SCALEF16(208, X6)
	VBROADCASTSS X6, Y6
	VFMADD231PS  Y6, Y1, Y0

	ADDQ $210, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q6block

	HSUM0
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    q6row
	VZEROUPPER
	RET

// q6kShuf broadcasts, for part k, int16 scale 2k to the low 128-bit lane (elements
// l < 16) and scale 2k+1 to the high lane, from eight int16 scales copied to both lanes.
DATA q6kShuf<>+0(SB)/8, $0x0100010001000100
DATA q6kShuf<>+8(SB)/8, $0x0100010001000100
DATA q6kShuf<>+16(SB)/8, $0x0302030203020302
DATA q6kShuf<>+24(SB)/8, $0x0302030203020302
DATA q6kShuf<>+32(SB)/8, $0x0504050405040504
DATA q6kShuf<>+40(SB)/8, $0x0504050405040504
DATA q6kShuf<>+48(SB)/8, $0x0706070607060706
DATA q6kShuf<>+56(SB)/8, $0x0706070607060706
DATA q6kShuf<>+64(SB)/8, $0x0908090809080908
DATA q6kShuf<>+72(SB)/8, $0x0908090809080908
DATA q6kShuf<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6kShuf<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6kShuf<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6kShuf<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6kShuf<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q6kShuf<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q6kShuf<>(SB), RODATA|NOPTR, $128

// Q2_K block (84 bytes): 16 scale bytes (low nibble the sub-block's scale, high its min),
// 64 bytes of 2-bit values, f16 d at 80, f16 dmin at 82. In half n (128 elements), element
// 32k + l (k = 0..3, l = 0..31) is bits 2k, 2k+1 of qs[32n + l] and its scale byte is
// 16-group 8n + 2k + l/16: the same group pattern as Q6_K, so a 32-byte part is one
// VPMADDUBSW and one VPMADDWD by scales shuffled to its two 128-bit lanes. value =
// d·sc·q − dmin·m, and the mins part needs only the activations' 16-group sums (Bsums):
// one VPMADDWD of the sixteen mins with them.

// Q2KPART(K, N): part K of half N, the half's bits in Y8 and its eight scales (bytes,
// repeated in each 64-bit lane) in Y11, into Y1.
#define Q2KPART(K, N) \
	VPSRLW     $(2*K), Y8, Y6; \
	VPAND      Y15, Y6, Y6; \
	VPMADDUBSW (4+128*N+32*K)(DI), Y6, Y6; \
	VPSHUFB    q2kShuf<>+(32*K)(SB), Y11, Y7; \
	VPMADDWD   Y7, Y6, Y6; \
	VPADDD     Y6, Y1, Y1

#define Q2KHALF(N) \
	VMOVDQU      (16+32*N)(SI), Y8; \
	VPBROADCASTQ (8*N)(SI), Y11; \
	VPAND        Y14, Y11, Y11; \
	Q2KPART(0, N); \
	Q2KPART(1, N); \
	Q2KPART(2, N); \
	Q2KPART(3, N)

// func dotQ2_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)
TEXT ·dotQ2_KQ8KAVX2(SB), NOSPLIT, $0-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVL         $0x03030303, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q2row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Y0, Y0, Y0

q2block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	VPXOR Y1, Y1, Y1
	Q2KHALF(0)
	Q2KHALF(1)
	// The mins: Σ_g m_g·Bsums_g, as eight int32 lanes.
	VPMOVZXBW    0(SI), Y8
	VPSRLW       $4, Y8, Y8
	VPMADDWD     260(DI), Y8, Y8
	// Both sums are reduced to integers before the float step, which is then the Go
	// kernel's: d·D·sumi − dmin·D·mins. The two products can cancel (an all-zero weight
	// is d·sc·q = dmin·m), and lane by lane they would leave their rounding behind.
	VPHADDD      Y8, Y1, Y1
	VEXTRACTI128 $1, Y1, X8
	VPADDD       X8, X1, X1
	VPHADDD      X1, X1, X1
	VCVTDQ2PS    X1, X1
	VMOVD        80(SI), X6
	VCVTPH2PS    X6, X6
	VBROADCASTSS 0(DI), X7
	VMULPS       X7, X6, X6
	VMULPS       X6, X1, X1
	VMOVSHDUP    X1, X6
	VSUBSS       X6, X1, X1
	VADDSS       X1, X0, X0

	ADDQ $84, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q2block

	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    q2row
	VZEROUPPER
	RET

// Q2KPART4(K, N): Q2KPART for four tokens (DI, DI+R8, DI+2·R8, DI+R9) into Y0–Y3: the
// part's values and scales are decoded once.
#define Q2KPART4(K, N) \
	VPSRLW     $(2*K), Y8, Y6; \
	VPAND      Y15, Y6, Y6; \
	VPSHUFB    q2kShuf<>+(32*K)(SB), Y11, Y7; \
	VPMADDUBSW (4+128*N+32*K)(DI), Y6, Y4; \
	VPMADDWD   Y7, Y4, Y4; \
	VPADDD     Y4, Y0, Y0; \
	VPMADDUBSW (4+128*N+32*K)(DI)(R8*1), Y6, Y4; \
	VPMADDWD   Y7, Y4, Y4; \
	VPADDD     Y4, Y1, Y1; \
	VPMADDUBSW (4+128*N+32*K)(DI)(R8*2), Y6, Y4; \
	VPMADDWD   Y7, Y4, Y4; \
	VPADDD     Y4, Y2, Y2; \
	VPMADDUBSW (4+128*N+32*K)(DI)(R9*1), Y6, Y4; \
	VPMADDWD   Y7, Y4, Y4; \
	VPADDD     Y4, Y3, Y3

#define Q2KHALF4(N) \
	VMOVDQU      (16+32*N)(SI), Y8; \
	VPBROADCASTQ (8*N)(SI), Y11; \
	VPAND        Y14, Y11, Y11; \
	Q2KPART4(0, N); \
	Q2KPART4(1, N); \
	Q2KPART4(2, N); \
	Q2KPART4(3, N)

// Q2KFLOAT4(B, M, SY, SX, F): the block's float step for the token whose block is at M
// (B its Bsums), its integer sums in SY (SX its low half; cleared after), into F: the
// one-token kernel's steps, so each token gets what it gets alone. Y8 holds the mins as
// words, X6 the block's d and dmin.
#define Q2KFLOAT4(B, M, SY, SX, F) \
	VPMADDWD     B, Y8, Y7; \
	VPHADDD      Y7, SY, SY; \
	VEXTRACTI128 $1, SY, X7; \
	VPADDD       X7, SX, SX; \
	VPHADDD      SX, SX, SX; \
	VCVTDQ2PS    SX, SX; \
	VBROADCASTSS M, X7; \
	VMULPS       X7, X6, X7; \
	VMULPS       X7, SX, SX; \
	VMOVSHDUP    SX, X7; \
	VSUBSS       X7, SX, SX; \
	VADDSS       SX, F, F; \
	VPXOR        SY, SY, SY

// func dotQ2_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)
//
// Four tokens (a, a+nb, a+2nb, a+3nb blocks) against nrows rows; token i's result for row
// r at out[i·ldo + r]. Registers: Y0–Y3 the tokens' integer sums, X5, X9, X10, X12 their
// float sums, R8 a token's bytes, R9 three tokens', R14 ldo's bytes, R11 three ldo's.
TEXT ·dotQ2_KQ8K4AVX2(SB), NOSPLIT, $0-48
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVQ         ldo+40(FP), R14
	SHLQ         $2, R14
	LEAQ         (R14)(R14*2), R11
	MOVQ         nblocks+16(FP), R8
	IMUL3Q       $Q8K_SIZE, R8, R8
	LEAQ         (R8)(R8*2), R9
	MOVL         $0x03030303, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	VPXOR        Y2, Y2, Y2
	VPXOR        Y3, Y3, Y3

q2r4row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS X5, X5, X5
	VXORPS X9, X9, X9
	VXORPS X10, X10, X10
	VXORPS X12, X12, X12

q2r4block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	Q2KHALF4(0)
	Q2KHALF4(1)
	VPMOVZXBW  0(SI), Y8
	VPSRLW     $4, Y8, Y8
	VMOVD      80(SI), X6
	VCVTPH2PS  X6, X6
	Q2KFLOAT4(260(DI), (DI), Y0, X0, X5)
	Q2KFLOAT4(260(DI)(R8*1), (DI)(R8*1), Y1, X1, X9)
	Q2KFLOAT4(260(DI)(R8*2), (DI)(R8*2), Y2, X2, X10)
	Q2KFLOAT4(260(DI)(R9*1), (DI)(R9*1), Y3, X3, X12)

	ADDQ $84, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q2r4block

	VMOVSS X5, (R13)
	VMOVSS X9, (R13)(R14*1)
	VMOVSS X10, (R13)(R14*2)
	VMOVSS X12, (R13)(R11*1)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    q2r4row
	VZEROUPPER
	RET

// q2kShuf zero-extends, for part k, scale byte 2k to int16 in the low 128-bit lane and
// scale byte 2k+1 in the high lane, from eight scale bytes repeated in every 64-bit lane.
DATA q2kShuf<>+0(SB)/8, $0x8000800080008000
DATA q2kShuf<>+8(SB)/8, $0x8000800080008000
DATA q2kShuf<>+16(SB)/8, $0x8001800180018001
DATA q2kShuf<>+24(SB)/8, $0x8001800180018001
DATA q2kShuf<>+32(SB)/8, $0x8002800280028002
DATA q2kShuf<>+40(SB)/8, $0x8002800280028002
DATA q2kShuf<>+48(SB)/8, $0x8003800380038003
DATA q2kShuf<>+56(SB)/8, $0x8003800380038003
DATA q2kShuf<>+64(SB)/8, $0x8004800480048004
DATA q2kShuf<>+72(SB)/8, $0x8004800480048004
DATA q2kShuf<>+80(SB)/8, $0x8005800580058005
DATA q2kShuf<>+88(SB)/8, $0x8005800580058005
DATA q2kShuf<>+96(SB)/8, $0x8006800680068006
DATA q2kShuf<>+104(SB)/8, $0x8006800680068006
DATA q2kShuf<>+112(SB)/8, $0x8007800780078007
DATA q2kShuf<>+120(SB)/8, $0x8007800780078007
GLOBL q2kShuf<>(SB), RODATA|NOPTR, $128

// IQ2_XXS block (66 bytes): f16 d, then per 32-element sub-block 4 grid indices and a
// 32-bit word of four 7-bit sign indices and a 4-bit scale s; a weight is
// d·(2s+1)/8 · grid · sign. The grid bytes (0x08, 0x19, 0x2b) are the unsigned operand of
// VPMADDUBSW as they are, read eight to a group from iq2xxsGrid (its little-endian uint64s
// are the bytes in element order), four groups to a register. The signs go onto the
// activations with VPSIGNB. They are built in registers rather than read from a table:
// four table reads and their index arithmetic cost more instructions than the vector
// steps, and the loads and instruction count are what bound this kernel. The odd integer
// 2s+1 multiplies the int16 pair sums in VPMADDWD; the 1/8 goes with d·D.
//
// Signs of group l: its index is the low 7 bits of the sign word shifted right by 7l
// (VPSRLVQ on the word repeated in each 64-bit lane), spread to the group's 8 bytes, and
// byte j tested for bit j: 0xff where set. Byte 7 tests nothing and comes out 0xff; the
// byte sum of the 64-bit lane (VPSADBW) is then 255·(set bits + 1), whose low bit is 1
// exactly when the parity bit, the eighth sign, is 0: shifted to the top of byte 7 and
// XORed in, it leaves 0xff (negate) or 0x7f (keep) there. ORing in 1 turns the other
// bytes' 0 (keep) into 1, as VPSIGNB zeroes on 0. The scale: the sign word's top half
// shifted right by 11 is 2s plus the last sign index's top bit, and 2s+1 whatever that bit
// once 1 is ORed in.
//
// Registers: R8 the grid, Y1 the block's integer sums, Y15 0.125, Y14 the sign shifts,
// Y13 the spreading shuffle, Y12 the bit of each byte, Y11 zero, Y10 bytes of 1, Y9 words
// of 1.

// IQ2XXSSUB(IB): sub-block IB of the block at SI into Y1.
#define IQ2XXSSUB(IB) \
	MOVBLZX      (2+8*IB)(SI), AX; \
	VMOVQ        (R8)(AX*8), X4; \
	MOVBLZX      (3+8*IB)(SI), AX; \
	VPINSRQ      $1, (R8)(AX*8), X4, X4; \
	MOVBLZX      (4+8*IB)(SI), AX; \
	VMOVQ        (R8)(AX*8), X5; \
	MOVBLZX      (5+8*IB)(SI), AX; \
	VPINSRQ      $1, (R8)(AX*8), X5, X5; \
	VINSERTI128  $1, X5, Y4, Y4; \
	VPBROADCASTD (6+8*IB)(SI), Y6; \
	VPSRLVQ      Y14, Y6, Y6; \
	VPSHUFB      Y13, Y6, Y6; \
	VPAND        Y12, Y6, Y6; \
	VPCMPEQB     Y12, Y6, Y6; \
	VPSADBW      Y11, Y6, Y7; \
	VPSLLQ       $63, Y7, Y7; \
	VPXOR        Y7, Y6, Y6; \
	VPOR         Y10, Y6, Y6; \
	VMOVDQU      (4+32*IB)(DI), Y7; \
	VPSIGNB      Y6, Y7, Y7; \
	VPMADDUBSW   Y7, Y4, Y4; \
	VPBROADCASTW (8+8*IB)(SI), Y5; \
	VPSRLW       $11, Y5, Y5; \
	VPOR         Y9, Y5, Y5; \
	VPMADDWD     Y5, Y4, Y4; \
	VPADDD       Y4, Y1, Y1

// func dotIQ2_XXSQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)
TEXT ·dotIQ2_XXSQ8KAVX2(SB), NOSPLIT, $0-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	LEAQ         ·iq2xxsGrid(SB), R8
	MOVL         $0x3e000000, AX // 0.125
	VMOVD        AX, X15
	VMOVDQU      iq2SignShift<>(SB), Y14
	VMOVDQU      iq2SignSpread<>(SB), Y13
	VPBROADCASTQ iq2SignBits<>(SB), Y12
	VPXOR        Y11, Y11, Y11
	MOVL         $0x01010101, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10
	MOVL         $0x00010001, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9

iq2row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Y0, Y0, Y0

iq2block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	VPXOR Y1, Y1, Y1
	IQ2XXSSUB(0)
	IQ2XXSSUB(1)
	IQ2XXSSUB(2)
	IQ2XXSSUB(3)
	IQ2XXSSUB(4)
	IQ2XXSSUB(5)
	IQ2XXSSUB(6)
	IQ2XXSSUB(7)
	// Each lane sums 32 products of at most 43·127·31: exact as a float.
	VCVTDQ2PS    Y1, Y1
	SCALEF16(0, X6)
	VMULSS       X15, X6, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS  Y6, Y1, Y0

	ADDQ $66, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  iq2block

	HSUM0
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    iq2row
	VZEROUPPER
	RET

// IQ2XXSTOK(IB, M, ACC): sub-block IB's products with the activations at M (decoded
// weights in Y4, signs in Y6, scale in Y5, all kept) into ACC, as IQ2XXSSUB's.
#define IQ2XXSTOK(IB, M, ACC) \
	VMOVDQU    M, Y7; \
	VPSIGNB    Y6, Y7, Y7; \
	VPMADDUBSW Y7, Y4, Y7; \
	VPMADDWD   Y5, Y7, Y7; \
	VPADDD     Y7, ACC, ACC

// IQ2XXSSUB4(IB): IQ2XXSSUB for four tokens (DI, DI+R10, DI+2·R10, DI+R11) into Y0–Y3:
// grid, signs and scale are decoded once.
#define IQ2XXSSUB4(IB) \
	MOVBLZX      (2+8*IB)(SI), AX; \
	VMOVQ        (R8)(AX*8), X4; \
	MOVBLZX      (3+8*IB)(SI), AX; \
	VPINSRQ      $1, (R8)(AX*8), X4, X4; \
	MOVBLZX      (4+8*IB)(SI), AX; \
	VMOVQ        (R8)(AX*8), X5; \
	MOVBLZX      (5+8*IB)(SI), AX; \
	VPINSRQ      $1, (R8)(AX*8), X5, X5; \
	VINSERTI128  $1, X5, Y4, Y4; \
	VPBROADCASTD (6+8*IB)(SI), Y6; \
	VPSRLVQ      Y14, Y6, Y6; \
	VPSHUFB      Y13, Y6, Y6; \
	VPAND        Y12, Y6, Y6; \
	VPCMPEQB     Y12, Y6, Y6; \
	VPSADBW      Y11, Y6, Y7; \
	VPSLLQ       $63, Y7, Y7; \
	VPXOR        Y7, Y6, Y6; \
	VPOR         Y10, Y6, Y6; \
	VPBROADCASTW (8+8*IB)(SI), Y5; \
	VPSRLW       $11, Y5, Y5; \
	VPOR         Y9, Y5, Y5; \
	IQ2XXSTOK(IB, (4+32*IB)(DI), Y0); \
	IQ2XXSTOK(IB, (4+32*IB)(DI)(R10*1), Y1); \
	IQ2XXSTOK(IB, (4+32*IB)(DI)(R10*2), Y2); \
	IQ2XXSTOK(IB, (4+32*IB)(DI)(R11*1), Y3)

// IQ2XXSFLOAT4(M, S, F): the one-token kernel's float step for the token whose block is
// at M, its integer sums in S (cleared after), into its float lanes at F(SP).
#define IQ2XXSFLOAT4(M, S, F) \
	VCVTDQ2PS    S, S; \
	MOVWLZX      0(SI), AX; \
	VMOVD        AX, X6; \
	VCVTPH2PS    X6, X6; \
	VMULSS       M, X6, X6; \
	VMULSS       X15, X6, X6; \
	VBROADCASTSS X6, Y6; \
	VMOVUPS      F(SP), Y7; \
	VFMADD231PS  Y6, S, Y7; \
	VMOVUPS      Y7, F(SP); \
	VPXOR        S, S, S

// IQ2XXSOUT4(F, O): the float lanes at F(SP) summed as HSUM0 does, to O.
#define IQ2XXSOUT4(F, O) \
	VMOVUPS F(SP), Y0; \
	HSUM0; \
	VMOVSS  X0, O

// func dotIQ2_XXSQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)
//
// Four tokens (a, a+nb, a+2nb, a+3nb blocks) against nrows rows; token i's result for row
// r at out[i·ldo + r], bit for bit what the one-token kernel gives it. Registers as
// there, and Y0–Y3 the tokens' integer sums, their float lanes in the frame, R10 a
// token's bytes, R11 three tokens', BX ldo's bytes, DX three ldo's.
TEXT ·dotIQ2_XXSQ8K4AVX2(SB), NOSPLIT, $128-48
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVQ         ldo+40(FP), BX
	SHLQ         $2, BX
	LEAQ         (BX)(BX*2), DX
	MOVQ         nblocks+16(FP), R10
	IMUL3Q       $Q8K_SIZE, R10, R10
	LEAQ         (R10)(R10*2), R11
	LEAQ         ·iq2xxsGrid(SB), R8
	MOVL         $0x3e000000, AX // 0.125
	VMOVD        AX, X15
	VMOVDQU      iq2SignShift<>(SB), Y14
	VMOVDQU      iq2SignSpread<>(SB), Y13
	VPBROADCASTQ iq2SignBits<>(SB), Y12
	VPXOR        Y11, Y11, Y11
	MOVL         $0x01010101, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10
	MOVL         $0x00010001, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9

iq2r4row:
	MOVQ    a+8(FP), DI
	MOVQ    nblocks+16(FP), CX
	VPXOR   Y0, Y0, Y0
	VPXOR   Y1, Y1, Y1
	VPXOR   Y2, Y2, Y2
	VPXOR   Y3, Y3, Y3
	VMOVUPS Y0, 0(SP)
	VMOVUPS Y0, 32(SP)
	VMOVUPS Y0, 64(SP)
	VMOVUPS Y0, 96(SP)

iq2r4block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	IQ2XXSSUB4(0)
	IQ2XXSSUB4(1)
	IQ2XXSSUB4(2)
	IQ2XXSSUB4(3)
	IQ2XXSSUB4(4)
	IQ2XXSSUB4(5)
	IQ2XXSSUB4(6)
	IQ2XXSSUB4(7)
	IQ2XXSFLOAT4((DI), Y0, 0)
	IQ2XXSFLOAT4((DI)(R10*1), Y1, 32)
	IQ2XXSFLOAT4((DI)(R10*2), Y2, 64)
	IQ2XXSFLOAT4((DI)(R11*1), Y3, 96)

	ADDQ $66, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  iq2r4block

	IQ2XXSOUT4(0, (R13))
	IQ2XXSOUT4(32, (R13)(BX*1))
	IQ2XXSOUT4(64, (R13)(BX*2))
	IQ2XXSOUT4(96, (R13)(DX*1))
	ADDQ $4, R13
	DECQ R12
	JNZ  iq2r4row
	VZEROUPPER
	RET

// iq2SignShift: group l's sign index to the bottom of 64-bit lane l.
DATA iq2SignShift<>+0(SB)/8, $0
DATA iq2SignShift<>+8(SB)/8, $7
DATA iq2SignShift<>+16(SB)/8, $14
DATA iq2SignShift<>+24(SB)/8, $21
GLOBL iq2SignShift<>(SB), RODATA|NOPTR, $32

// iq2SignSpread: each 64-bit lane's low byte to all eight of its bytes.
DATA iq2SignSpread<>+0(SB)/8, $0x0000000000000000
DATA iq2SignSpread<>+8(SB)/8, $0x0808080808080808
DATA iq2SignSpread<>+16(SB)/8, $0x0000000000000000
DATA iq2SignSpread<>+24(SB)/8, $0x0808080808080808
GLOBL iq2SignSpread<>(SB), RODATA|NOPTR, $32

// iq2SignBits: byte j's sign bit, none for byte 7 (the parity).
DATA iq2SignBits<>+0(SB)/8, $0x0040201008040201
GLOBL iq2SignBits<>(SB), RODATA|NOPTR, $8

// The one-token kernels prefetch the rows 1 KiB ahead: decode streams the weights once and
// waits on memory otherwise (the Q8_0 dot measured 1.15× with it).

// The four-token form of dotQ4_KQ8KAVX2, for prefill and batched decode: each block's
// scales are decoded and its nibbles widened once for four tokens' activations (a, a+nb,
// a+2nb, a+3nb blocks). Every float operation is the one-token kernel's, in its order, so
// each token's results are bit for bit what it gets alone.
//
// Registers: SI the row; DI, R8, R9, R10 the four tokens' blocks; Y0–Y3 their float sums;
// Y10, Y11, Y12 and Y14 their integer sums of the block (Y12 and Y14 hold the mins and d
// in the one-token kernel, which are not needed while the chunks go by); Y4–Y7 the chunk's
// nibbles and scales, Y8 and Y9 products, Y13 a temporary, Y15 the nibble mask.

// func dotQ4_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)
TEXT ·dotQ4_KQ8K4AVX2(SB), NOSPLIT, $16-48
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R11
	MOVQ         out+32(FP), R12
	MOVQ         ldo+40(FP), R13
	SHLQ         $2, R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

q4row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	IMUL3Q $Q8K_SIZE, CX, AX
	LEAQ   (DI)(AX*1), R8
	LEAQ   (R8)(AX*1), R9
	LEAQ   (R9)(AX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q4block:
	Q4KSCALES
	VFNMADD231PS Q8K_SUMS(DI), Y12, Y0
	VFNMADD231PS Q8K_SUMS(R8), Y12, Y1
	VFNMADD231PS Q8K_SUMS(R9), Y12, Y2
	VFNMADD231PS Q8K_SUMS(R10), Y12, Y3
	VPXOR        Y10, Y10, Y10
	VPXOR        Y11, Y11, Y11
	VPXOR        Y12, Y12, Y12
	VPXOR        Y14, Y14, Y14
	Q4KNIBBLES(0)
	Q4KTOKEN(DI, 0, Y10)
	Q4KTOKEN(R8, 0, Y11)
	Q4KTOKEN(R9, 0, Y12)
	Q4KTOKEN(R10, 0, Y14)
	Q4KNIBBLES(1)
	Q4KTOKEN(DI, 1, Y10)
	Q4KTOKEN(R8, 1, Y11)
	Q4KTOKEN(R9, 1, Y12)
	Q4KTOKEN(R10, 1, Y14)
	Q4KNIBBLES(2)
	Q4KTOKEN(DI, 2, Y10)
	Q4KTOKEN(R8, 2, Y11)
	Q4KTOKEN(R9, 2, Y12)
	Q4KTOKEN(R10, 2, Y14)
	Q4KNIBBLES(3)
	Q4KTOKEN(DI, 3, Y10)
	Q4KTOKEN(R8, 3, Y11)
	Q4KTOKEN(R9, 3, Y12)
	Q4KTOKEN(R10, 3, Y14)
	// d goes in X4 here: X14 holds token 3's sums.
	MOVWLZX   0(SI), AX
	VMOVD     AX, X4
	VCVTPH2PS X4, X4
	Q4KSUM4(DI, Y10, Y0)
	Q4KSUM4(R8, Y11, Y1)
	Q4KSUM4(R9, Y12, Y2)
	Q4KSUM4(R10, Y14, Y3)

	ADDQ $144, SI
	ADDQ $Q8K_SIZE, DI
	ADDQ $Q8K_SIZE, R8
	ADDQ $Q8K_SIZE, R9
	ADDQ $Q8K_SIZE, R10
	DECQ CX
	JNZ  q4block

	LEAQ   (R13)(R13*2), AX
	HSUM(Y0, X0)
	VMOVSS X0, (R12)
	HSUM(Y1, X1)
	VMOVSS X1, (R12)(R13*1)
	HSUM(Y2, X2)
	VMOVSS X2, (R12)(R13*2)
	HSUM(Y3, X3)
	VMOVSS X3, (R12)(AX*1)
	ADDQ   $4, R12
	DECQ   R11
	JNZ    q4row
	VZEROUPPER
	RET

// The four-token form of dotQ6_KQ8KAVX2: each part's 6-bit values are built once (loaded
// again for each part, to leave registers for four tokens; AVX2 shifts only registers) and multiplied with four tokens'
// activations; the float operations are the one-token kernel's, in its order.
//
// Registers: SI the row; DI, R8, R9, R10 the tokens' blocks; Y0–Y3 their float sums, Y8,
// Y9, Y10, Y12 their integer sums of the block; Y6 the part's values, Y7 its scales, Y11
// the half's scales, Y5 and Y13 temporaries, Y14 and Y15 masks.

// Q6K4TOKEN(P, DOFF, ACC): token P's 32 elements of the part into ACC.
#define Q6K4TOKEN(P, DOFF, ACC) \
	VPMADDUBSW DOFF(P), Y6, Y5; \
	VPMADDWD   Y7, Y5, Y5; \
	VPADDD     Y5, ACC, ACC

// Q6K4PART(K, N, QL, SHIFT): part K of half N, its nibbles at QL(SI) (high ones when SHIFT
// is 4), for the four tokens.
#define Q6K4PART(K, N, QL, SHIFT) \
	VMOVDQU    (128+32*N)(SI), Y7; \
	VPSRLW     $(2*K), Y7, Y7; \
	VPAND      Y14, Y7, Y7; \
	VPSLLW     $4, Y7, Y7; \
	VMOVDQU    QL(SI), Y6; \
	VPSRLW     $SHIFT, Y6, Y6; \
	VPAND      Y15, Y6, Y6; \
	VPOR       Y7, Y6, Y6; \
	VPSHUFB    q6kShuf<>+(32*K)(SB), Y11, Y7; \
	Q6K4TOKEN(DI, 4+128*N+32*K, Y8); \
	Q6K4TOKEN(R8, 4+128*N+32*K, Y9); \
	Q6K4TOKEN(R9, 4+128*N+32*K, Y10); \
	Q6K4TOKEN(R10, 4+128*N+32*K, Y12)

#define Q6K4HALF(N) \
	VPMOVSXBW   (192+8*N)(SI), X11; \
	VINSERTI128 $1, X11, Y11, Y11; \
	Q6K4PART(0, N, 64*N, 0); \
	Q6K4PART(1, N, 64*N+32, 0); \
	Q6K4PART(2, N, 64*N, 4); \
	Q6K4PART(3, N, 64*N+32, 4)

// Q6K4SUM(P, ACC, F): take token P's bias from ACC, then F += ACC as floats · (d · D);
// Y4 holds the sixteen scales as int16, X6 d as float.
#define Q6K4SUM(P, ACC, F) \
	VPMADDWD     260(P), Y4, Y5; \
	VPSLLD       $5, Y5, Y5; \
	VPSUBD       Y5, ACC, ACC; \
	VCVTDQ2PS    ACC, ACC; \
	VMULSS       0(P), X6, X13; \
	VBROADCASTSS X13, Y13; \
	VFMADD231PS  Y13, ACC, F

// func dotQ6_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)
TEXT ·dotQ6_KQ8K4AVX2(SB), NOSPLIT, $0-48
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R11
	MOVQ         out+32(FP), R12
	MOVQ         ldo+40(FP), R13
	SHLQ         $2, R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x03030303, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q6row4:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	IMUL3Q $Q8K_SIZE, CX, AX
	LEAQ   (DI)(AX*1), R8
	LEAQ   (R8)(AX*1), R9
	LEAQ   (R9)(AX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q6block4:
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y12, Y12, Y12
	Q6K4HALF(0)
	Q6K4HALF(1)
	VPMOVSXBW 192(SI), Y4
	MOVWLZX   208(SI), AX
	VMOVD     AX, X6
	VCVTPH2PS X6, X6
	Q6K4SUM(DI, Y8, Y0)
	Q6K4SUM(R8, Y9, Y1)
	Q6K4SUM(R9, Y10, Y2)
	Q6K4SUM(R10, Y12, Y3)

	ADDQ $210, SI
	ADDQ $Q8K_SIZE, DI
	ADDQ $Q8K_SIZE, R8
	ADDQ $Q8K_SIZE, R9
	ADDQ $Q8K_SIZE, R10
	DECQ CX
	JNZ  q6block4

	LEAQ   (R13)(R13*2), AX
	HSUM(Y0, X0)
	VMOVSS X0, (R12)
	HSUM(Y1, X1)
	VMOVSS X1, (R12)(R13*1)
	HSUM(Y2, X2)
	VMOVSS X2, (R12)(R13*2)
	HSUM(Y3, X3)
	VMOVSS X3, (R12)(AX*1)
	ADDQ   $4, R12
	DECQ   R11
	JNZ    q6row4
	VZEROUPPER
	RET

// func absMaxAVX2(x *float32) float32
//
// The largest |x[i]| of a block of 256, NaNs ignored (VMAXPS returns its second source,
// the running maximum, when the first is NaN), as quantizeQ8KBlock's loop finds it.
TEXT ·absMaxAVX2(SB), NOSPLIT, $0-12
	MOVQ         x+0(FP), SI
	MOVL         $0x7fffffff, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2
	VXORPS       Y3, Y3, Y3
	MOVQ         $8, CX

absmax:
	VANDPS (SI), Y15, Y4
	VANDPS 32(SI), Y15, Y5
	VANDPS 64(SI), Y15, Y6
	VANDPS 96(SI), Y15, Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ   $128, SI
	DECQ   CX
	JNZ    absmax

	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+8(FP)
	VZEROUPPER
	RET

// q8kPerm puts the dwords of VPACKSSDW+VPACKSSWB's lane-interleaved bytes back in order.
DATA q8kPerm<>+0(SB)/4, $0
DATA q8kPerm<>+4(SB)/4, $4
DATA q8kPerm<>+8(SB)/4, $1
DATA q8kPerm<>+12(SB)/4, $5
DATA q8kPerm<>+16(SB)/4, $2
DATA q8kPerm<>+20(SB)/4, $6
DATA q8kPerm<>+24(SB)/4, $3
DATA q8kPerm<>+28(SB)/4, $7
GLOBL q8kPerm<>(SB), RODATA|NOPTR, $32

// GROUPSUM(Y, X, OFF): the sum of Y's eight int32 lanes (X its low half) as int16 at OFF(DI).
#define GROUPSUM(Y, X, OFF) \
	VEXTRACTI128 $1, Y, X6; \
	VPADDD       X6, X, X; \
	VPSHUFD      $0x4e, X, X6; \
	VPADDD       X6, X, X; \
	VPSHUFD      $0xb1, X, X6; \
	VPADDD       X6, X, X; \
	VMOVD        X, AX; \
	MOVW         AX, OFF(DI)

// func quantizeQ8KAVX2(x *float32, iscale float32, b *Q8K)
//
// b.Qs[i] = min(127, round(iscale·x[i])) and b.Bsums, as quantizeQ8KBlock computes them:
// the product rounded to float32, then to the nearest integer, ties to even (VCVTPS2DQ
// under the default rounding mode, as nearestInt).
TEXT ·quantizeQ8KAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	VBROADCASTSS iscale+8(FP), Y15
	MOVQ         b+16(FP), DI
	MOVL         $127, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	MOVQ         $q8kPerm<>(SB), AX
	VMOVDQU      (AX), Y13
	LEAQ         4(DI), R8 // Qs
	ADDQ         $260, DI  // Bsums
	MOVQ         $8, CX

q8kquant:
	VMULPS    (SI), Y15, Y0
	VMULPS    32(SI), Y15, Y1
	VMULPS    64(SI), Y15, Y2
	VMULPS    96(SI), Y15, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPMINSD   Y14, Y0, Y0
	VPMINSD   Y14, Y1, Y1
	VPMINSD   Y14, Y2, Y2
	VPMINSD   Y14, Y3, Y3
	VPADDD    Y1, Y0, Y4
	GROUPSUM(Y4, X4, 0)
	VPADDD    Y3, Y2, Y5
	GROUPSUM(Y5, X5, 2)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y13, Y0
	VMOVDQU   Y0, (R8)
	ADDQ      $128, SI
	ADDQ      $32, R8
	ADDQ      $4, DI
	DECQ      CX
	JNZ       q8kquant
	VZEROUPPER
	RET

// Q5_K block (176 bytes): Q4_K's d, dmin and scales, then 32 bytes qh and 128 bytes of
// nibbles at 48. Element l of sub-block j has bit j of qh[l] as its fifth bit (16), so the
// Q4_K kernels serve with the bit ORed into each nibble: it is moved to bit 4 by one shift
// of the qh bytes (left for bits 0–3, right for 5–7) and masked.

DATA q5kBit<>+0(SB)/8, $0x1010101010101010
DATA q5kBit<>+8(SB)/8, $0x1010101010101010
DATA q5kBit<>+16(SB)/8, $0x1010101010101010
DATA q5kBit<>+24(SB)/8, $0x1010101010101010
GLOBL q5kBit<>(SB), RODATA|NOPTR, $32

// Q5KHIGH(SHIFT, N, T, DST): bit 4−N (SHIFT left) or 4+N (right) of the qh bytes, as 16, into DST.
#define Q5KHIGH(SHIFT, N, T, DST) \
	VMOVDQU 16(SI), T; \
	SHIFT   $N, T, T; \
	VPAND   q5kBit<>(SB), T, T; \
	VPOR    T, DST, DST

// Q5KNIBBLES(J, LO, LN, HI, HN): chunk J's five-bit values in Y4 (sub-block 2J) and Y5
// (2J+1), their scales in Y6 and Y7; T the temporary.
#define Q5KNIBBLES(J, LO, LN, HI, HN, T) \
	VMOVDQU      (48+32*J)(SI), Y4; \
	VPSRLW       $4, Y4, Y5; \
	VPAND        Y15, Y4, Y4; \
	VPAND        Y15, Y5, Y5; \
	Q5KHIGH(LO, LN, T, Y4); \
	Q5KHIGH(HI, HN, T, Y5); \
	VPBROADCASTW (4*J)(SP), Y6; \
	VPBROADCASTW (4*J+2)(SP), Y7

#define Q5KCHUNK0(T) Q5KNIBBLES(0, VPSLLW, 4, VPSLLW, 3, T)
#define Q5KCHUNK1(T) Q5KNIBBLES(1, VPSLLW, 2, VPSLLW, 1, T)
#define Q5KCHUNK2(T) Q5KNIBBLES(2, VPSLLW, 0, VPSRLW, 1, T)
#define Q5KCHUNK3(T) Q5KNIBBLES(3, VPSRLW, 2, VPSRLW, 3, T)

// func dotQ5_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)
TEXT ·dotQ5_KQ8KAVX2(SB), NOSPLIT, $16-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

q5row:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Y0, Y0, Y0

q5block:
	PREFETCHT0   1024(SI)
	PREFETCHT0   1088(SI)
	PREFETCHT0   1152(SI)
	Q4KSCALES
	VFNMADD231PS Q8K_SUMS(DI), Y12, Y0
	VPXOR        Y1, Y1, Y1
	Q5KCHUNK0(Y8)
	Q4KTOKEN(DI, 0, Y1)
	Q5KCHUNK1(Y8)
	Q4KTOKEN(DI, 1, Y1)
	Q5KCHUNK2(Y8)
	Q4KTOKEN(DI, 2, Y1)
	Q5KCHUNK3(Y8)
	Q4KTOKEN(DI, 3, Y1)
	Q4KD
	Q4KSUM(DI, Y1, Y0)

	ADDQ $176, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q5block

	HSUM(Y0, X0)
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    q5row
	VZEROUPPER
	RET

// func dotQ5_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)
//
// The four-token form, as dotQ4_KQ8K4AVX2 (same registers).
TEXT ·dotQ5_KQ8K4AVX2(SB), NOSPLIT, $16-48
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), R11
	MOVQ         out+32(FP), R12
	MOVQ         ldo+40(FP), R13
	SHLQ         $2, R13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

q5row4:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	IMUL3Q $Q8K_SIZE, CX, AX
	LEAQ   (DI)(AX*1), R8
	LEAQ   (R8)(AX*1), R9
	LEAQ   (R9)(AX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q5block4:
	Q4KSCALES
	VFNMADD231PS Q8K_SUMS(DI), Y12, Y0
	VFNMADD231PS Q8K_SUMS(R8), Y12, Y1
	VFNMADD231PS Q8K_SUMS(R9), Y12, Y2
	VFNMADD231PS Q8K_SUMS(R10), Y12, Y3
	VPXOR        Y10, Y10, Y10
	VPXOR        Y11, Y11, Y11
	VPXOR        Y12, Y12, Y12
	VPXOR        Y14, Y14, Y14
	Q5KCHUNK0(Y8)
	Q4KTOKEN(DI, 0, Y10)
	Q4KTOKEN(R8, 0, Y11)
	Q4KTOKEN(R9, 0, Y12)
	Q4KTOKEN(R10, 0, Y14)
	Q5KCHUNK1(Y8)
	Q4KTOKEN(DI, 1, Y10)
	Q4KTOKEN(R8, 1, Y11)
	Q4KTOKEN(R9, 1, Y12)
	Q4KTOKEN(R10, 1, Y14)
	Q5KCHUNK2(Y8)
	Q4KTOKEN(DI, 2, Y10)
	Q4KTOKEN(R8, 2, Y11)
	Q4KTOKEN(R9, 2, Y12)
	Q4KTOKEN(R10, 2, Y14)
	Q5KCHUNK3(Y8)
	Q4KTOKEN(DI, 3, Y10)
	Q4KTOKEN(R8, 3, Y11)
	Q4KTOKEN(R9, 3, Y12)
	Q4KTOKEN(R10, 3, Y14)
	MOVWLZX   0(SI), AX
	VMOVD     AX, X4
	VCVTPH2PS X4, X4
	Q4KSUM4(DI, Y10, Y0)
	Q4KSUM4(R8, Y11, Y1)
	Q4KSUM4(R9, Y12, Y2)
	Q4KSUM4(R10, Y14, Y3)

	ADDQ $176, SI
	ADDQ $Q8K_SIZE, DI
	ADDQ $Q8K_SIZE, R8
	ADDQ $Q8K_SIZE, R9
	ADDQ $Q8K_SIZE, R10
	DECQ CX
	JNZ  q5block4

	LEAQ   (R13)(R13*2), AX
	HSUM(Y0, X0)
	VMOVSS X0, (R12)
	HSUM(Y1, X1)
	VMOVSS X1, (R12)(R13*1)
	HSUM(Y2, X2)
	VMOVSS X2, (R12)(R13*2)
	HSUM(Y3, X3)
	VMOVSS X3, (R12)(AX*1)
	ADDQ   $4, R12
	DECQ   R11
	JNZ    q5row4
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels of the 8-bit activation path: weights widened to bytes in registers and
// multiplied with the int8 activations by VPMADDUBSW (unsigned weight × signed activation,
// pairs summed to int16), the int16 sums scaled by the sub-block scales with VPMADDWD, and
// one float conversion per block. The weight side must be the unsigned operand, so signed
// formats are biased to unsigned and the bias is taken back with the activations' group
// sums (Q8K.Bsums).
//
// Q8K layout: D float32 at 0, Qs [256]int8 at 4, Bsums [16]int16 at 260; 292 bytes.

#define Q8K_SIZE 292

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
// value = d·sc·q − dmin·m, so Σ value·a = d·D·Σ_j sc_j·Σ q·a − dmin·D·Σ_j m_j·(group sums).
//
// Frame: 0(SP) the eight scales as int16, for VPBROADCASTW.

// Q4KCHUNK(J): the 64 elements of chunk J into Y1 (int32 lanes).
#define Q4KCHUNK(J) \
	VMOVDQU      (16+32*J)(SI), Y4; \
	VPSRLW       $4, Y4, Y5; \
	VPAND        Y15, Y4, Y4; \
	VPAND        Y15, Y5, Y5; \
	VPMADDUBSW   (4+64*J)(DI), Y4, Y4; \
	VPMADDUBSW   (36+64*J)(DI), Y5, Y5; \
	VPBROADCASTW (4*J)(SP), Y6; \
	VPBROADCASTW (4*J+2)(SP), Y7; \
	VPMADDWD     Y6, Y4, Y4; \
	VPMADDWD     Y7, Y5, Y5; \
	VPADDD       Y4, Y1, Y1; \
	VPADDD       Y5, Y2, Y2

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
	VXORPS Y0, Y0, Y0         // Σ d·D·sumi
	VXORPS Y3, Y3, Y3         // Σ dmin·D·mins, in X3 only

block:
	// Scales and mins, bytewise: sc0..3 = u0&0x3f, sc4..7 = u2&0x0f | (u0>>2)&0x30,
	// m0..3 = u1&0x3f, m4..7 = (u2>>4)&0x0f | (u1>>2)&0x30.
	MOVL      4(SI), AX
	MOVL      8(SI), BX
	MOVL      12(SI), DX
	MOVL      DX, R8
	SHRL      $4, R8
	ANDL      $0x0f0f0f0f, R8
	MOVL      BX, R9
	SHRL      $2, R9
	ANDL      $0x30303030, R9
	ORL       R9, R8              // m4..7
	ANDL      $0x3f3f3f3f, BX     // m0..3
	ANDL      $0x0f0f0f0f, DX
	MOVL      AX, R9
	SHRL      $2, R9
	ANDL      $0x30303030, R9
	ORL       R9, DX              // sc4..7
	ANDL      $0x3f3f3f3f, AX     // sc0..3
	VMOVD     AX, X8
	VPINSRD   $1, DX, X8, X8
	VPMOVZXBW X8, X8
	VMOVDQU   X8, 0(SP)
	VMOVD     BX, X9
	VPINSRD   $1, R8, X9, X9
	VPMOVZXBW X9, X9              // mins as int16

	// Pair sums of the group sums: one per 32-element sub-block, then Σ m_j·pair_j.
	VMOVDQU  260(DI), X10
	VMOVDQU  276(DI), X11
	VPHADDW  X11, X10, X10
	VPMADDWD X9, X10, X10        // 4 int32
	VCVTDQ2PS X10, X10
	SCALEF16(2, X7)
	VBROADCASTSS X7, X7
	VFNMADD231PS X7, X10, X3

	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	Q4KCHUNK(0)
	Q4KCHUNK(1)
	Q4KCHUNK(2)
	Q4KCHUNK(3)
	VPADDD       Y2, Y1, Y1
	VCVTDQ2PS    Y1, Y1
	SCALEF16(0, X6)
	VBROADCASTSS X6, Y6
	VFMADD231PS  Y6, Y1, Y0

	ADDQ $144, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  block

	VADDPS Y3, Y0, Y0
	HSUM0
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

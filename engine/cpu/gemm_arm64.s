//go:build arm64 && !purego

#include "textflag.h"

// fmla Vd.4s, Vn.4s, Vm.s[i], which the Go assembler has no mnemonic for (encoding checked
// against llvm-mc; engine/quant/neon_arm64.h has the rest of the family).
#define FMLAE(d, n, m, i) WORD $(0x4F801000 | ((i)&1)<<21 | (m)<<16 | ((i)>>1)<<11 | (n)<<5 | (d))

// GEMMK adds one k step: row i of the tile (V16+2i, V17+2i) += B row (BL, BH) · lane L of
// A register V(i).
#define GEMMK(BL, BH, L) \
	FMLAE(16, BL, 0, L); \
	FMLAE(17, BH, 0, L); \
	FMLAE(18, BL, 1, L); \
	FMLAE(19, BH, 1, L); \
	FMLAE(20, BL, 2, L); \
	FMLAE(21, BH, 2, L); \
	FMLAE(22, BL, 3, L); \
	FMLAE(23, BH, 3, L); \
	FMLAE(24, BL, 4, L); \
	FMLAE(25, BH, 4, L); \
	FMLAE(26, BL, 5, L); \
	FMLAE(27, BH, 5, L); \
	FMLAE(28, BL, 6, L); \
	FMLAE(29, BH, 6, L); \
	FMLAE(30, BL, 7, L); \
	FMLAE(31, BH, 7, L)

// gemm8x8NEON is the 8×8 micro-kernel: C = A·B for 8 rows of A (stride lda floats) and k
// rows of 8 floats of B (stride ldb), into 8 rows of 8 floats of C (stride ldc). Every
// C[i][j] is one chain of fused multiply-adds from zero in k order, as in gemm4x4Go (which
// the Go compiler fuses the same way on arm64), so the two give the same bits. The main
// loop takes four k at a time: one 4-float load per row of A, whose lanes feed the four
// steps.
// func gemm8x8NEON(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
TEXT ·gemm8x8NEON(SB), NOSPLIT, $0-56
	MOVD k+0(FP), R10
	MOVD a+8(FP), R0
	MOVD lda+16(FP), R9
	MOVD b+24(FP), R8
	MOVD ldb+32(FP), R12
	MOVD c+40(FP), R11
	MOVD ldc+48(FP), R13
	LSL  $2, R9
	LSL  $2, R12
	LSL  $2, R13
	ADD  R9, R0, R1
	ADD  R9, R1, R2
	ADD  R9, R2, R3
	ADD  R9, R3, R4
	ADD  R9, R4, R5
	ADD  R9, R5, R6
	ADD  R9, R6, R7
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	VEOR V24.B16, V24.B16, V24.B16
	VEOR V25.B16, V25.B16, V25.B16
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	VEOR V28.B16, V28.B16, V28.B16
	VEOR V29.B16, V29.B16, V29.B16
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V31.B16, V31.B16, V31.B16
	LSR  $2, R10, R14
	AND  $3, R10, R15
	CBZ  R14, tail

loop4:
	VLD1.P 16(R0), [V0.S4]
	VLD1.P 16(R1), [V1.S4]
	VLD1.P 16(R2), [V2.S4]
	VLD1.P 16(R3), [V3.S4]
	VLD1.P 16(R4), [V4.S4]
	VLD1.P 16(R5), [V5.S4]
	VLD1.P 16(R6), [V6.S4]
	VLD1.P 16(R7), [V7.S4]
	VLD1.P (R8)(R12), [V8.S4, V9.S4]
	VLD1.P (R8)(R12), [V10.S4, V11.S4]
	VLD1.P (R8)(R12), [V12.S4, V13.S4]
	VLD1.P (R8)(R12), [V14.S4, V15.S4]
	GEMMK(8, 9, 0)
	GEMMK(10, 11, 1)
	GEMMK(12, 13, 2)
	GEMMK(14, 15, 3)
	SUBS   $1, R14
	BNE    loop4

tail:
	CBZ R15, store

tail1:
	FMOVS.P 4(R0), F0
	FMOVS.P 4(R1), F1
	FMOVS.P 4(R2), F2
	FMOVS.P 4(R3), F3
	FMOVS.P 4(R4), F4
	FMOVS.P 4(R5), F5
	FMOVS.P 4(R6), F6
	FMOVS.P 4(R7), F7
	VLD1.P  (R8)(R12), [V8.S4, V9.S4]
	GEMMK(8, 9, 0)
	SUBS    $1, R15
	BNE     tail1

store:
	VST1.P [V16.S4, V17.S4], (R11)(R13)
	VST1.P [V18.S4, V19.S4], (R11)(R13)
	VST1.P [V20.S4, V21.S4], (R11)(R13)
	VST1.P [V22.S4, V23.S4], (R11)(R13)
	VST1.P [V24.S4, V25.S4], (R11)(R13)
	VST1.P [V26.S4, V27.S4], (R11)(R13)
	VST1.P [V28.S4, V29.S4], (R11)(R13)
	VST1.P [V30.S4, V31.S4], (R11)(R13)
	RET

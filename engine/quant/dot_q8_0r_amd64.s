//go:build amd64 && !purego

#include "textflag.h"

// Q8_0 × Q8_0 over the repacked layout (repack.go): sixteen rows interleaved, each 32-bit
// lane of a ZMM register one row's. The Go reference (dotRowsQ8_0Go) keeps eight lanes
// per row, lane l summing bytes 4l…4l+3 of every block; here quad l's 64 bytes hold those
// four bytes of the sixteen rows, so one VPDPBUSD with the activations' four bytes
// broadcast gives lane l's integer sums of all sixteen rows, and eight accumulators per
// token (Z0–Z7, Z8–Z15) keep the eight lanes apart. VPDPBUSD multiplies unsigned by
// signed bytes: the layout stores each quant plus 128, and every sum starts at −128 × the
// sum of the four activation bytes (one VPDPBUSD of 0x80 bytes by the activation block,
// negated and kept on the stack), so it is the exact Σ w·a. Then, per lane, the float
// step of the reference in its order: d = half(w)·half(a), lane += float32(s)·d as a
// product and then a sum, and at the end ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)): the
// results are dotRowsQ8_0Go's bit for bit, whatever the batch size.
//
// Registers: Z16–Z23 the block's eight quads, Z24 its sixteen scales, Z25/Z26 the
// tokens' d, Z27/Z28 scratch, Y29 0x80 bytes, Z31 zero.

#define Q8R_BLOCK 544

// Q8RWEIGHTS loads the group-block at SI.
#define Q8RWEIGHTS \
	VCVTPH2PS (SI), Z24; \
	VMOVDQU64 32(SI), Z16; \
	VMOVDQU64 96(SI), Z17; \
	VMOVDQU64 160(SI), Z18; \
	VMOVDQU64 224(SI), Z19; \
	VMOVDQU64 288(SI), Z20; \
	VMOVDQU64 352(SI), Z21; \
	VMOVDQU64 416(SI), Z22; \
	VMOVDQU64 480(SI), Z23

// Q8RPREP sets D to the token's block scale times the rows' and CORR(SP)… to the eight
// corrections −128·(a[4l]+…+a[4l+3]) of the token's block at P.
#define Q8RPREP(P, D, CORR) \
	VPBROADCASTW  (P), Y27; \
	VCVTPH2PS     Y27, Z27; \
	VMULPS        Z27, Z24, D; \
	VMOVDQU32     2(P), Y27; \
	VPXORD        Y28, Y28, Y28; \
	VPDPBUSD      Y27, Y29, Y28; \
	VPSUBD        Y28, Y31, Y28; \
	VMOVDQU32     Y28, CORR(SP)

// Q8RQUAD adds quad L of the block (weights W) for the token at P to ACC.
#define Q8RQUAD(L, W, P, D, CORR, ACC) \
	VPBROADCASTD  (CORR+4*L)(SP), Z27; \
	VPDPBUSD.BCST (2+4*L)(P), W, Z27; \
	VCVTDQ2PS     Z27, Z27; \
	VMULPS        D, Z27, Z27; \
	VADDPS        Z27, ACC, ACC

#define Q8RTOKEN(P, D, CORR, A0, A1, A2, A3, A4, A5, A6, A7) \
	Q8RPREP(P, D, CORR); \
	Q8RQUAD(0, Z16, P, D, CORR, A0); \
	Q8RQUAD(1, Z17, P, D, CORR, A1); \
	Q8RQUAD(2, Z18, P, D, CORR, A2); \
	Q8RQUAD(3, Z19, P, D, CORR, A3); \
	Q8RQUAD(4, Z20, P, D, CORR, A4); \
	Q8RQUAD(5, Z21, P, D, CORR, A5); \
	Q8RQUAD(6, Z22, P, D, CORR, A6); \
	Q8RQUAD(7, Z23, P, D, CORR, A7)

// Q8RFOLD leaves ((A0+A4)+(A1+A5)) + ((A2+A6)+(A3+A7)) in A0.
#define Q8RFOLD(A0, A1, A2, A3, A4, A5, A6, A7) \
	VADDPS A4, A0, A0; \
	VADDPS A5, A1, A1; \
	VADDPS A1, A0, A0; \
	VADDPS A6, A2, A2; \
	VADDPS A7, A3, A3; \
	VADDPS A3, A2, A2; \
	VADDPS A2, A0, A0

// Q8RZERO clears a token's eight accumulators.
#define Q8RZERO(A0, A1, A2, A3, A4, A5, A6, A7) \
	VPXORD A0, A0, A0; \
	VPXORD A1, A1, A1; \
	VPXORD A2, A2, A2; \
	VPXORD A3, A3, A3; \
	VPXORD A4, A4, A4; \
	VPXORD A5, A5, A5; \
	VPXORD A6, A6, A6; \
	VPXORD A7, A7, A7

#define Q8RCONST \
	MOVL         $0x80808080, AX; \
	VPBROADCASTD AX, Y29; \
	VPXORD       Z31, Z31, Z31

// func dotQ8_0R16Q8_0x2VNNI(packed, a *byte, nblocks, ngroups int, out *float32, ldo int)
//
// Two tokens (a, then a + 34·nblocks), ngroups groups of sixteen rows: token i's row r at
// out[i·ldo + r].
TEXT ·dotQ8_0R16Q8_0x2VNNI(SB), NOSPLIT, $64-48
	MOVQ packed+0(FP), SI
	MOVQ nblocks+16(FP), R9
	IMULQ $34, R9
	MOVQ ngroups+24(FP), DX
	MOVQ out+32(FP), R8
	MOVQ ldo+40(FP), R11
	SHLQ $2, R11
	Q8RCONST

group2:
	Q8RZERO(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	Q8RZERO(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	MOVQ   a+8(FP), DI
	LEAQ   (DI)(R9*1), R10
	MOVQ   nblocks+16(FP), CX

block2:
	PREFETCHT0 (12*Q8R_BLOCK)(SI)
	Q8RWEIGHTS
	Q8RTOKEN(DI, Z25, 0, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	Q8RTOKEN(R10, Z26, 32, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	ADDQ $Q8R_BLOCK, SI
	ADDQ $34, DI
	ADDQ $34, R10
	DECQ CX
	JNZ  block2

	Q8RFOLD(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	Q8RFOLD(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	VMOVUPS Z0, (R8)
	VMOVUPS Z8, (R8)(R11*1)
	ADDQ    $64, R8
	DECQ    DX
	JNZ     group2
	VZEROUPPER
	RET

// func dotQ8_0R16Q8_0VNNI(packed, a *byte, nblocks, ngroups int, out *float32)
TEXT ·dotQ8_0R16Q8_0VNNI(SB), NOSPLIT, $32-40
	MOVQ packed+0(FP), SI
	MOVQ ngroups+24(FP), DX
	MOVQ out+32(FP), R8
	Q8RCONST

group1:
	Q8RZERO(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX

block1:
	PREFETCHT0 (12*Q8R_BLOCK)(SI)
	Q8RWEIGHTS
	Q8RTOKEN(DI, Z25, 0, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ADDQ $Q8R_BLOCK, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  block1

	Q8RFOLD(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VMOVUPS Z0, (R8)
	ADDQ    $64, R8
	DECQ    DX
	JNZ     group1
	VZEROUPPER
	RET

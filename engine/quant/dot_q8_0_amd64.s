//go:build amd64 && !purego

#include "textflag.h"

// Q8_0 rows against activations quantized to Q8_0 (DotRowsQ8_0): four rows per pass over
// the activations, then one at a time; each row's arithmetic is dotRowsQ8_0Go's whatever
// pass it takes. VPMADDUBSW multiplies unsigned by signed bytes, so the weight's sign moves
// onto the activation (VPSIGNB) and its magnitude is the unsigned side; with activations
// in [−127, 127] no pair sum saturates (2·128·127 < 2¹⁵).

// Q8ROW adds one block of the row at P to ACC: Y4 holds the activations' scale, Y5 their
// quants, Y15 sixteen-bit ones. Y6..Y9 are scratch.
#define Q8ROW(P, ACC) \
	VPBROADCASTW (P), X6; \
	VCVTPH2PS    X6, Y6; \
	VMULPS       Y4, Y6, Y6; \
	VMOVDQU      2(P), Y7; \
	VPSIGNB      Y7, Y7, Y8; \
	VPSIGNB      Y7, Y5, Y9; \
	VPMADDUBSW   Y9, Y8, Y8; \
	VPMADDWD     Y15, Y8, Y8; \
	VCVTDQ2PS    Y8, Y8; \
	VMULPS       Y6, Y8, Y8; \
	VADDPS       Y8, ACC, ACC

// Q8ACT loads the activations' block at DI.
#define Q8ACT \
	VPBROADCASTW (DI), X4; \
	VCVTPH2PS    X4, Y4; \
	VMOVDQU      2(DI), Y5

// Q8STORE folds ACC's lanes as ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) into OFF(R8).
#define Q8STORE(ACC, XACC, OFF) \
	VEXTRACTF128 $1, ACC, X6; \
	VADDPS       X6, XACC, XACC; \
	VHADDPS      XACC, XACC, XACC; \
	VHADDPS      XACC, XACC, XACC; \
	VMOVSS       XACC, OFF(R8)

// func dotQ8_0Q8_0RowsAVX2(rows, a *byte, nblocks, nrows int, out *float32)
TEXT ·dotQ8_0Q8_0RowsAVX2(SB), NOSPLIT, $0-40
	MOVQ         rows+0(FP), SI
	MOVQ         nblocks+16(FP), CX
	MOVQ         nrows+24(FP), DX
	MOVQ         out+32(FP), R8
	IMUL3Q       $34, CX, R9 // row bytes
	MOVL         $0x00010001, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

rows4:
	CMPQ   DX, $4
	JLT    rows1
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   a+8(FP), DI
	MOVQ   SI, R10
	LEAQ   (SI)(R9*1), R11
	LEAQ   (R11)(R9*1), R12
	LEAQ   (R12)(R9*1), R13
	MOVQ   CX, BX

loop4:
	Q8ACT
	Q8ROW(R10, Y0)
	Q8ROW(R11, Y1)
	Q8ROW(R12, Y2)
	Q8ROW(R13, Y3)
	ADDQ $34, DI
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, R12
	ADDQ $34, R13
	DECQ BX
	JNZ  loop4
	Q8STORE(Y0, X0, 0)
	Q8STORE(Y1, X1, 4)
	Q8STORE(Y2, X2, 8)
	Q8STORE(Y3, X3, 12)
	LEAQ (SI)(R9*4), SI
	ADDQ $16, R8
	SUBQ $4, DX
	JMP  rows4

rows1:
	TESTQ  DX, DX
	JZ     done
	VXORPS Y0, Y0, Y0
	MOVQ   a+8(FP), DI
	MOVQ   SI, R10
	MOVQ   CX, BX

loop1:
	Q8ACT
	Q8ROW(R10, Y0)
	ADDQ $34, DI
	ADDQ $34, R10
	DECQ BX
	JNZ  loop1
	Q8STORE(Y0, X0, 0)
	ADDQ R9, SI
	ADDQ $4, R8
	DECQ DX
	JMP  rows1

done:
	VZEROUPPER
	RET

// The dword order that undoes VPACKSSDW/VPACKSSWB's interleaving of 128-bit lanes.
DATA q8_0Perm<>+0(SB)/4, $0
DATA q8_0Perm<>+4(SB)/4, $4
DATA q8_0Perm<>+8(SB)/4, $1
DATA q8_0Perm<>+12(SB)/4, $5
DATA q8_0Perm<>+16(SB)/4, $2
DATA q8_0Perm<>+20(SB)/4, $6
DATA q8_0Perm<>+24(SB)/4, $3
DATA q8_0Perm<>+28(SB)/4, $7
GLOBL q8_0Perm<>(SB), RODATA|NOPTR, $32

// Q8QUANT quantizes Y (the block's values) by Y6 (1/d) in place, rounding half away from
// zero as quantizeQ8_0Go: t = trunc(q), then ±1 where q − t (exact) reaches ±½.
#define Q8QUANT(Y) \
	VMULPS     Y6, Y, Y; \
	VROUNDPS   $3, Y, Y7; \
	VSUBPS     Y7, Y, Y8; \
	VCMPPS     $0x1d, Y12, Y8, Y9; \
	VANDPS     Y13, Y9, Y9; \
	VADDPS     Y9, Y7, Y7; \
	VCMPPS     $0x12, Y10, Y8, Y9; \
	VANDPS     Y13, Y9, Y9; \
	VSUBPS     Y9, Y7, Y7; \
	VCVTTPS2DQ Y7, Y

// func quantizeQ8_0AVX2(x *float32, dst *byte, nblocks int)
TEXT ·quantizeQ8_0AVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         dst+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	TESTQ        CX, CX
	JZ           done
	MOVL         $0x7fffffff, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15       // |·| mask
	MOVL         $0x42fe0000, AX
	VMOVD        AX, X14        // 127
	MOVL         $0x3f800000, AX
	VMOVD        AX, X13
	VBROADCASTSS X13, Y13       // 1
	MOVL         $0x3f000000, AX
	VMOVD        AX, X12
	VBROADCASTSS X12, Y12       // ½
	MOVL         $0xbf000000, AX
	VMOVD        AX, X10
	VBROADCASTSS X10, Y10       // −½
	VMOVDQU      q8_0Perm<>(SB), Y11

loop:
	VMOVUPS      (SI), Y0
	VMOVUPS      32(SI), Y1
	VMOVUPS      64(SI), Y2
	VMOVUPS      96(SI), Y3
	VANDPS       Y15, Y0, Y4
	VANDPS       Y15, Y1, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       Y15, Y2, Y5
	VANDPS       Y15, Y3, Y6
	VMAXPS       Y6, Y5, Y5
	VMAXPS       Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS       X5, X4, X4
	VPERMILPS    $0x4e, X4, X5
	VMAXPS       X5, X4, X4
	VPERMILPS    $0xb1, X4, X5
	VMAXPS       X5, X4, X4     // amax
	VDIVSS       X14, X4, X4    // d = amax/127
	VCVTPS2PH    $0, X4, X5
	VPEXTRW      $0, X5, AX
	MOVW         AX, (DI)
	VXORPS       X6, X6, X6
	VUCOMISS     X6, X4
	JEQ          zero
	VDIVSS       X4, X13, X6    // 1/d
	VBROADCASTSS X6, Y6
	Q8QUANT(Y0)
	Q8QUANT(Y1)
	Q8QUANT(Y2)
	Q8QUANT(Y3)
	VPACKSSDW    Y1, Y0, Y0
	VPACKSSDW    Y3, Y2, Y2
	VPACKSSWB    Y2, Y0, Y0
	VPERMD       Y0, Y11, Y0
	VMOVDQU      Y0, 2(DI)
	JMP          next

zero:
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, 2(DI)

next:
	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// Q8_0 rows against activations quantized to Q8_0 (DotRowsQ8_0), row after row with
// dotRowsQ8_0Go's arithmetic. The rows are read in order, one sequential stream as the
// exact kernel's: a form that took four rows per pass over the activations was 2× the
// exact kernel in L2 but 1.3–1.5× slower than it on a matrix streamed from memory
// (BenchmarkDotRowsQ8_0/16384), where decode reads its weights. VPMADDUBSW multiplies
// unsigned by signed bytes, so the weight's sign moves onto the activation (VPSIGNB) and
// its magnitude is the unsigned side; with activations in [−127, 127] no pair sum
// saturates (2·128·127 < 2¹⁵).

// Q8BLOCK adds block OFF of the row at SI, against the activations' block OFF at DI, to Y0.
// Y15 holds sixteen-bit ones; Y4..Y9 are scratch.
#define Q8BLOCK(OFF) \
	VPBROADCASTW OFF(DI), X4; \
	VCVTPH2PS    X4, Y4; \
	VPBROADCASTW OFF(SI), X6; \
	VCVTPH2PS    X6, Y6; \
	VMULPS       Y4, Y6, Y6; \
	VMOVDQU      (OFF+2)(SI), Y7; \
	VPSIGNB      Y7, Y7, Y8; \
	VMOVDQU      (OFF+2)(DI), Y9; \
	VPSIGNB      Y7, Y9, Y9; \
	VPMADDUBSW   Y9, Y8, Y8; \
	VPMADDWD     Y15, Y8, Y8; \
	VCVTDQ2PS    Y8, Y8; \
	VMULPS       Y6, Y8, Y8; \
	VADDPS       Y8, Y0, Y0

// func dotQ8_0Q8_0RowsAVX2(rows, a *byte, nblocks, nrows int, out *float32)
TEXT ·dotQ8_0Q8_0RowsAVX2(SB), NOSPLIT, $0-40
	MOVQ         rows+0(FP), SI
	MOVQ         nrows+24(FP), DX
	MOVQ         out+32(FP), R8
	MOVL         $0x00010001, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

row:
	VXORPS Y0, Y0, Y0
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	SHRQ   $1, CX
	JZ     tail

loop2:
	PREFETCHT0 1024(SI)
	Q8BLOCK(0)
	Q8BLOCK(34)
	ADDQ       $68, SI
	ADDQ       $68, DI
	DECQ       CX
	JNZ        loop2

tail:
	MOVQ nblocks+16(FP), CX
	ANDQ $1, CX
	JZ   store
	Q8BLOCK(0)
	ADDQ $34, SI

store:
	// ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7))
	VEXTRACTF128 $1, Y0, X6
	VADDPS       X6, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (R8)
	ADDQ         $4, R8
	DECQ         DX
	JNZ          row
	VZEROUPPER
	RET

// Q8TOKEN adds block OFF of the row, whose scale is in Y6, bytes in Y7 and magnitudes in Y8,
// against the block OFF of the activations at P, to ACC, as Q8BLOCK does. Y4, Y9, Y10 are
// scratch.
#define Q8TOKEN(OFF, P, ACC) \
	VPBROADCASTW OFF(P), X4; \
	VCVTPH2PS    X4, Y4; \
	VMULPS       Y4, Y6, Y4; \
	VMOVDQU      (OFF+2)(P), Y9; \
	VPSIGNB      Y7, Y9, Y9; \
	VPMADDUBSW   Y9, Y8, Y10; \
	VPMADDWD     Y15, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VMULPS       Y4, Y10, Y10; \
	VADDPS       Y10, ACC, ACC

// Q8BLOCK4 adds block OFF of the row at SI to Y0…Y3, against the four tokens' blocks at DI,
// R10, R11 and R12.
#define Q8BLOCK4(OFF) \
	VPBROADCASTW OFF(SI), X6; \
	VCVTPH2PS    X6, Y6; \
	VMOVDQU      (OFF+2)(SI), Y7; \
	VPSIGNB      Y7, Y7, Y8; \
	Q8TOKEN(OFF, DI, Y0); \
	Q8TOKEN(OFF, R10, Y1); \
	Q8TOKEN(OFF, R11, Y2); \
	Q8TOKEN(OFF, R12, Y3)

// Q8FOLD stores ACC's lanes folded as ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) at DST.
#define Q8FOLD(ACC, XACC, DST) \
	VEXTRACTF128 $1, ACC, X6; \
	VADDPS       X6, XACC, XACC; \
	VHADDPS      XACC, XACC, XACC; \
	VHADDPS      XACC, XACC, XACC; \
	VMOVSS       XACC, DST

// func dotQ8_0Q8_0Rows4AVX2(rows, a *byte, nblocks, nrows int, out *float32, ldo int)
//
// Four tokens at once (DotRows4Q8_0): each row block is loaded and its magnitudes taken
// once for the four, and every token's lanes see exactly Q8BLOCK's operations.
TEXT ·dotQ8_0Q8_0Rows4AVX2(SB), NOSPLIT, $0-48
	MOVQ         rows+0(FP), SI
	MOVQ         nblocks+16(FP), R9
	IMULQ        $34, R9
	MOVQ         nrows+24(FP), DX
	MOVQ         out+32(FP), R8
	MOVQ         ldo+40(FP), R13
	SHLQ         $2, R13
	MOVL         $0x00010001, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15

row4:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   a+8(FP), DI
	LEAQ   (DI)(R9*1), R10
	LEAQ   (R10)(R9*1), R11
	LEAQ   (R11)(R9*1), R12
	MOVQ   nblocks+16(FP), CX

block4:
	PREFETCHT0 512(SI)
	Q8BLOCK4(0)
	ADDQ       $34, SI
	ADDQ       $34, DI
	ADDQ       $34, R10
	ADDQ       $34, R11
	ADDQ       $34, R12
	DECQ       CX
	JNZ        block4

	MOVQ R8, AX
	Q8FOLD(Y0, X0, (AX))
	ADDQ R13, AX
	Q8FOLD(Y1, X1, (AX))
	ADDQ R13, AX
	Q8FOLD(Y2, X2, (AX))
	ADDQ R13, AX
	Q8FOLD(Y3, X3, (AX))
	ADDQ $4, R8
	DECQ DX
	JNZ  row4
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

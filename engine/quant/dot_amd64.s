//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// AVX2/FMA kernels for DotF32. Each keeps several independent accumulators so that the
// 4-cycle FMA latency does not serialise the loop, and widens quantized values to float32
// in registers (VPMOVZXBD/VPMOVSXBD + VCVTDQ2PS, VCVTPH2PS for halves) instead of storing
// a dequantized row.

// Reduce the eight lanes of Y0 to X0's low float.
#define HSUM0 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VHADDPS      X0, X0, X0

// Four accumulators Y0..Y3 folded into Y0.
#define FOLD4 \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y2, Y0, Y0

#define ZERO4 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

// func dotAVX2(a, b *float32, n int) float32; n is a multiple of 32.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	ZERO4
	SHRQ $5, CX
	JZ   done

loop:
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	DECQ        CX
	JNZ         loop

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyAVX2(alpha float32, x, y *float32, n int); n is a multiple of 32.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	SHRQ         $5, CX
	JZ           done

loop:
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VMOVUPS     64(DI), Y3
	VMOVUPS     96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	VMOVUPS     Y3, 64(DI)
	VMOVUPS     Y4, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	DECQ        CX
	JNZ         loop

done:
	VZEROUPPER
	RET

// func dotF16AVX2(h *uint16, x *float32, n int) float32; n is a multiple of 32.
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ h+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	ZERO4
	SHRQ $5, CX
	JZ   done

loop:
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	DECQ        CX
	JNZ         loop

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q8_0 block: f16 d, 32 × int8. Σ d·q·x = d·Σ q·x, one FMA into the total per block.
// func dotQ8_0AVX2(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-28
	MOVQ row+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nblocks+16(FP), CX
	ZERO4
	SHRQ $1, CX
	JZ   tail

loop2:
	// Two blocks per iteration, into separate totals Y0 and Y1.
	PREFETCHT0   1024(SI)
	VPBROADCASTW (SI), X8
	VCVTPH2PS    X8, Y8
	VPBROADCASTW 34(SI), X9
	VCVTPH2PS    X9, Y9
	VPMOVSXBD    2(SI), Y4
	VPMOVSXBD    10(SI), Y5
	VPMOVSXBD    18(SI), Y6
	VPMOVSXBD    26(SI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       (DI), Y4, Y4
	VMULPS       32(DI), Y5, Y5
	VFMADD231PS  64(DI), Y6, Y4
	VFMADD231PS  96(DI), Y7, Y5
	VADDPS       Y5, Y4, Y4
	VFMADD231PS  Y8, Y4, Y0
	VPMOVSXBD    36(SI), Y4
	VPMOVSXBD    44(SI), Y5
	VPMOVSXBD    52(SI), Y6
	VPMOVSXBD    60(SI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       128(DI), Y4, Y4
	VMULPS       160(DI), Y5, Y5
	VFMADD231PS  192(DI), Y6, Y4
	VFMADD231PS  224(DI), Y7, Y5
	VADDPS       Y5, Y4, Y4
	VFMADD231PS  Y9, Y4, Y1
	ADDQ         $68, SI
	ADDQ         $256, DI
	DECQ         CX
	JNZ          loop2

tail:
	MOVQ nblocks+16(FP), CX
	ANDQ $1, CX
	JZ   done
	VPBROADCASTW (SI), X8
	VCVTPH2PS    X8, Y8
	VPMOVSXBD    2(SI), Y4
	VPMOVSXBD    10(SI), Y5
	VPMOVSXBD    18(SI), Y6
	VPMOVSXBD    26(SI), Y7
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       (DI), Y4, Y4
	VMULPS       32(DI), Y5, Y5
	VFMADD231PS  64(DI), Y6, Y4
	VFMADD231PS  96(DI), Y7, Y5
	VADDPS       Y5, Y4, Y4
	VFMADD231PS  Y8, Y4, Y0

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q4_K super-block (144 bytes): f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins,
// 128 bytes of nibbles. Byte l of 32-byte chunk j holds element 64j+l (low nibble, sub-block
// 2j) and 64j+32+l (high nibble, sub-block 2j+1). Each weight is rebuilt exactly as
// ggml dequantizes it, d·sc·q − dmin·m, with one VFMSUB (d·sc·q is exact in float32), then
// FMA'd with x.
//
// Frame: 0(SP) 8 scale bytes + 8 min bytes, 16(SP) 8 float scales, 48(SP) 8 float mins.

// Q4KGROUP handles bytes 8k..8k+7 of the current chunk (R11) against x (DI).
#define Q4KGROUP(K, ACCLO, ACCHI) \
	VPMOVZXBD   (8*K)(R11), Y12; \
	VPAND       Y15, Y12, Y13; \
	VPSRLD      $4, Y12, Y12; \
	VCVTDQ2PS   Y13, Y13; \
	VCVTDQ2PS   Y12, Y12; \
	VFMSUB213PS Y9, Y8, Y13; \
	VFMSUB213PS Y11, Y10, Y12; \
	VFMADD231PS (32*K)(DI), Y13, ACCLO; \
	VFMADD231PS (128+32*K)(DI), Y12, ACCHI

// func dotQ4_KAVX2(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ4_KAVX2(SB), NOSPLIT, $80-28
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	ZERO4
	MOVL         $0x0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	TESTQ        CX, CX
	JZ           done

block:
	KSCALES

	XORQ R10, R10
	LEAQ 16(SI), R11

chunk:
	VBROADCASTSS 16(SP)(R10*8), Y8
	VBROADCASTSS 48(SP)(R10*8), Y9
	VBROADCASTSS 20(SP)(R10*8), Y10
	VBROADCASTSS 52(SP)(R10*8), Y11
	Q4KGROUP(0, Y0, Y2)
	Q4KGROUP(1, Y1, Y3)
	Q4KGROUP(2, Y0, Y2)
	Q4KGROUP(3, Y1, Y3)
	ADDQ         $32, R11
	ADDQ         $256, DI
	INCQ         R10
	CMPQ         R10, $4
	JLT          chunk

	ADDQ $144, SI
	DECQ CX
	JNZ  block

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q6_K super-block (210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits),
// 16 int8 scales, f16 d. Per 128-element half n and l in 0..31, element l+32k (k=0..3)
// takes ql[l] or ql[l+32] (low or high nibble) and bit pair k of qh[l], biased by 32; its
// scale is sc[8n + l/16 + 2k]. Weights are rebuilt as (d·sc)·(q−32), ggml's order.
//
// Frame: 0(SP) the 16 float scales d·sc.

// Q6KGROUP handles l = L..L+7 of half H (byte offsets of ql, qh and x precomputed).
#define Q6KGROUP(QL, QH, XOFF, S) \
	VPMOVZXBD    (QL)(SI), Y4; \
	VPMOVZXBD    (QL+32)(SI), Y5; \
	VPMOVZXBD    (QH)(SI), Y6; \
	VPAND        Y15, Y4, Y7; \
	VPSLLD       $4, Y6, Y8; \
	VPAND        Y14, Y8, Y8; \
	VPOR         Y8, Y7, Y7; \
	VPAND        Y15, Y5, Y8; \
	VPSLLD       $2, Y6, Y9; \
	VPAND        Y14, Y9, Y9; \
	VPOR         Y9, Y8, Y8; \
	VPSRLD       $4, Y4, Y4; \
	VPAND        Y14, Y6, Y9; \
	VPOR         Y9, Y4, Y4; \
	VPSRLD       $4, Y5, Y5; \
	VPSRLD       $2, Y6, Y6; \
	VPAND        Y14, Y6, Y6; \
	VPOR         Y6, Y5, Y5; \
	VPSUBD       Y13, Y7, Y7; \
	VPSUBD       Y13, Y8, Y8; \
	VPSUBD       Y13, Y4, Y4; \
	VPSUBD       Y13, Y5, Y5; \
	VCVTDQ2PS    Y7, Y7; \
	VCVTDQ2PS    Y8, Y8; \
	VCVTDQ2PS    Y4, Y4; \
	VCVTDQ2PS    Y5, Y5; \
	VBROADCASTSS (4*S)(SP), Y9; \
	VBROADCASTSS (4*S+8)(SP), Y10; \
	VBROADCASTSS (4*S+16)(SP), Y11; \
	VBROADCASTSS (4*S+24)(SP), Y12; \
	VMULPS       Y9, Y7, Y7; \
	VMULPS       Y10, Y8, Y8; \
	VMULPS       Y11, Y4, Y4; \
	VMULPS       Y12, Y5, Y5; \
	VFMADD231PS  (XOFF)(DI), Y7, Y0; \
	VFMADD231PS  (XOFF+128)(DI), Y8, Y1; \
	VFMADD231PS  (XOFF+256)(DI), Y4, Y2; \
	VFMADD231PS  (XOFF+384)(DI), Y5, Y3

// func dotQ6_KAVX2(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ6_KAVX2(SB), NOSPLIT, $64-28
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	ZERO4
	MOVL         $0x0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x30, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $32, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	TESTQ        CX, CX
	JZ           done

block:
	VPBROADCASTW 208(SI), X4
	VCVTPH2PS    X4, Y4
	VPMOVSXBD    192(SI), Y5
	VPMOVSXBD    200(SI), Y6
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VMULPS       Y4, Y5, Y5
	VMULPS       Y4, Y6, Y6
	VMOVUPS      Y5, 0(SP)
	VMOVUPS      Y6, 32(SP)

	// Q6KGROUP(ql offset, qh offset, x byte offset, first scale index)
	Q6KGROUP(0, 128, 0, 0)
	Q6KGROUP(8, 136, 32, 0)
	Q6KGROUP(16, 144, 64, 1)
	Q6KGROUP(24, 152, 96, 1)
	Q6KGROUP(64, 160, 512, 8)
	Q6KGROUP(72, 168, 544, 8)
	Q6KGROUP(80, 176, 576, 9)
	Q6KGROUP(88, 184, 608, 9)

	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  block

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Experiment (see BenchmarkDotQ8_0Int8Act): Q8_0 weights against activations quantized to
// Q8_0, integer products as ggml does. VPMADDUBSW multiplies unsigned by signed bytes, so
// the weight's sign is moved onto the activation first.
// func dotQ8_0Q8_0AVX2(w, a *byte, nblocks int) float32
TEXT ·dotQ8_0Q8_0AVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         a+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	ZERO4
	MOVL         $0x00010001, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	TESTQ        CX, CX
	JZ           done

loop:
	VPBROADCASTW (SI), X8
	VCVTPH2PS    X8, Y8
	VPBROADCASTW (DI), X9
	VCVTPH2PS    X9, Y9
	VMULPS       Y9, Y8, Y8
	VMOVDQU      2(SI), Y1
	VMOVDQU      2(DI), Y2
	VPSIGNB      Y1, Y1, Y3
	VPSIGNB      Y1, Y2, Y4
	VPMADDUBSW   Y4, Y3, Y5
	VPMADDWD     Y15, Y5, Y5
	VCVTDQ2PS    Y5, Y5
	VFMADD231PS  Y8, Y5, Y0
	ADDQ         $34, SI
	ADDQ         $34, DI
	DECQ         CX
	JNZ          loop

done:
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// IQ2_XXS super-block (66 bytes): f16 d, then per 32-element sub-block 4 grid indices and a
// 32-bit word of four 7-bit sign indices plus a 4-bit scale s; the weights are
// d·(2s+1)/8 · grid · sign. The grid and sign tables come pre-widened from Go
// (iq2xxsGridF32: 8 floats per point; iqSignMask: 8 sign-bit masks per sign index), so each
// group of 8 weights is one load, one XOR and one FMA.

// IQ2XXSGROUP handles group L (0..3) of the sub-block at R11 with sign word BX.
#define IQ2XXSGROUP(L, SHIFT, OP, ACC) \
	MOVBLZX L(R11), AX; \
	SHLQ    $5, AX; \
	MOVL    BX, DX; \
	SHRL    $SHIFT, DX; \
	ANDL    $127, DX; \
	SHLQ    $5, DX; \
	VMOVUPS (R12)(AX*1), Y4; \
	VXORPS  (R13)(DX*1), Y4, Y4; \
	OP      (32*L)(DI), Y4, ACC

// func dotIQ2_XXSAVX2(row *byte, x *float32, nblocks int, grid *[256][8]float32, signs *[128][8]uint32) float32
TEXT ·dotIQ2_XXSAVX2(SB), NOSPLIT, $0-44
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	MOVQ         grid+24(FP), R12
	MOVQ         signs+32(FP), R13
	VXORPS       Y0, Y0, Y0
	MOVL         $0x3e000000, AX // 0.125
	VMOVD        AX, X7
	VBROADCASTSS X7, Y7
	TESTQ        CX, CX
	JZ           done

block:
	VPBROADCASTW (SI), X8
	VCVTPH2PS    X8, Y8
	VMULPS       Y7, Y8, Y8
	VXORPS       Y5, Y5, Y5
	LEAQ         2(SI), R11
	XORQ         R10, R10

sub:
	MOVL 4(R11), BX
	IQ2XXSGROUP(0, 0, VMULPS, Y2)
	IQ2XXSGROUP(1, 7, VMULPS, Y3)
	IQ2XXSGROUP(2, 14, VFMADD231PS, Y2)
	IQ2XXSGROUP(3, 21, VFMADD231PS, Y3)
	VADDPS       Y3, Y2, Y2
	SHRL         $28, BX
	LEAL         1(BX)(BX*1), BX
	VCVTSI2SSL   BX, X6, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS  Y6, Y2, Y5
	ADDQ         $8, R11
	ADDQ         $128, DI
	INCQ         R10
	CMPQ         R10, $8
	JLT          sub

	VFMADD231PS Y8, Y5, Y0
	ADDQ        $66, SI
	DECQ        CX
	JNZ         block

done:
	HSUM0
	VMOVSS X0, ret+40(FP)
	VZEROUPPER
	RET

// Q5_K super-block (176 bytes): as Q4_K, plus 32 bytes qh at 16 holding the fifth bit:
// bit 2j of qh[l] for element 64j+l and bit 2j+1 for element 64j+32+l; nibbles at 48.
// d·sc·q with q < 32 is still exact in float32, so VFMSUB rebuilds ggml's weights.

#define Q5KGROUP(K, ACCLO, ACCHI) \
	VPMOVZXBD   (8*K)(R11), Y12; \
	VPMOVZXBD   (8*K)(R9), Y6; \
	VPSRLD      X5, Y6, Y6; \
	VPSLLD      $4, Y6, Y7; \
	VPAND       Y14, Y7, Y7; \
	VPSLLD      $3, Y6, Y6; \
	VPAND       Y14, Y6, Y6; \
	VPAND       Y15, Y12, Y13; \
	VPSRLD      $4, Y12, Y12; \
	VPOR        Y7, Y13, Y13; \
	VPOR        Y6, Y12, Y12; \
	VCVTDQ2PS   Y13, Y13; \
	VCVTDQ2PS   Y12, Y12; \
	VFMSUB213PS Y9, Y8, Y13; \
	VFMSUB213PS Y11, Y10, Y12; \
	VFMADD231PS (32*K)(DI), Y13, ACCLO; \
	VFMADD231PS (128+32*K)(DI), Y12, ACCHI

// func dotQ5_KAVX2(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ5_KAVX2(SB), NOSPLIT, $80-28
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	ZERO4
	MOVL         $0x0f, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x10, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	TESTQ        CX, CX
	JZ           done

block:
	KSCALES

	XORQ R10, R10
	LEAQ 48(SI), R11
	LEAQ 16(SI), R9

chunk:
	VBROADCASTSS 16(SP)(R10*8), Y8
	VBROADCASTSS 48(SP)(R10*8), Y9
	VBROADCASTSS 20(SP)(R10*8), Y10
	VBROADCASTSS 52(SP)(R10*8), Y11
	LEAQ         (R10)(R10*1), AX
	VMOVQ        AX, X5
	Q5KGROUP(0, Y0, Y2)
	Q5KGROUP(1, Y1, Y3)
	Q5KGROUP(2, Y0, Y2)
	Q5KGROUP(3, Y1, Y3)
	ADDQ         $32, R11
	ADDQ         $256, DI
	INCQ         R10
	CMPQ         R10, $4
	JLT          chunk

	ADDQ $176, SI
	DECQ CX
	JNZ  block

done:
	FOLD4
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotMXFP4AVX2(row *byte, x *float32, nblocks int, levels *[16]int8, scales *[256]float32) float32
//
// dotMXFP4Go's order exactly, with separate multiplies and adds (no FMA): lane i of a block
// sums the products of elements i, i+8, i+16, i+24, the lanes are scaled and added to the
// row's, which are folded (0+4 …), (0+2, 1+3), 0+1 at the end.
TEXT ·dotMXFP4AVX2(SB), NOSPLIT, $0-44
	MOVQ          row+0(FP), SI
	MOVQ          x+8(FP), DI
	MOVQ          nblocks+16(FP), CX
	MOVQ          levels+24(FP), R8
	MOVQ          scales+32(FP), R9
	VMOVDQU       (R8), X7
	MOVL          $0x0f0f0f0f, AX
	VMOVD         AX, X6
	VPBROADCASTD  X6, X6
	VXORPS        Y0, Y0, Y0

mxloop:
	MOVBLZX       (SI), AX
	VBROADCASTSS  (R9)(AX*4), Y8
	VMOVDQU       1(SI), X1
	VPSRLW        $4, X1, X2
	VPAND         X6, X1, X1
	VPAND         X6, X2, X2
	VPSHUFB       X1, X7, X1     // levels of elements 0..15
	VPSHUFB       X2, X7, X2     // levels of elements 16..31
	VPMOVSXBD     X1, Y4
	VPSRLDQ       $8, X1, X1
	VPMOVSXBD     X1, Y5
	VPMOVSXBD     X2, Y9
	VPSRLDQ       $8, X2, X2
	VPMOVSXBD     X2, Y10
	VCVTDQ2PS     Y4, Y4
	VCVTDQ2PS     Y5, Y5
	VCVTDQ2PS     Y9, Y9
	VCVTDQ2PS     Y10, Y10
	VMULPS        (DI), Y4, Y4
	VMULPS        32(DI), Y5, Y5
	VADDPS        Y5, Y4, Y4
	VMULPS        64(DI), Y9, Y9
	VADDPS        Y9, Y4, Y4
	VMULPS        96(DI), Y10, Y10
	VADDPS        Y10, Y4, Y4
	VMULPS        Y8, Y4, Y4
	VADDPS        Y4, Y0, Y0
	ADDQ          $17, SI
	ADDQ          $128, DI
	DECQ          CX
	JNZ           mxloop

	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VMOVHLPS      X0, X0, X1
	VADDPS        X1, X0, X0
	VMOVSHDUP     X0, X1
	VADDSS        X1, X0, X0
	VZEROUPPER
	MOVSS         X0, ret+40(FP)
	RET

//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// AVX2 dequantizers for the types the CPU backend expands before a batched matrix product.
// Each computes every weight with the same float32 operations, in the same order, as the Go
// decoders (and ggml's to_float), so the results are bit-identical.

// Q8_0: y = float32(q)·d.
// func dequantQ8_0AVX2(row *byte, y *float32, nblocks int)
TEXT ·dequantQ8_0AVX2(SB), NOSPLIT, $0-24
	MOVQ  row+0(FP), SI
	MOVQ  y+8(FP), DI
	MOVQ  nblocks+16(FP), CX
	TESTQ CX, CX
	JZ    done

loop:
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
	VMULPS       Y8, Y4, Y4
	VMULPS       Y8, Y5, Y5
	VMULPS       Y8, Y6, Y6
	VMULPS       Y8, Y7, Y7
	VMOVUPS      Y4, (DI)
	VMOVUPS      Y5, 32(DI)
	VMOVUPS      Y6, 64(DI)
	VMOVUPS      Y7, 96(DI)
	ADDQ         $34, SI
	ADDQ         $128, DI
	DECQ         CX
	JNZ          loop

done:
	VZEROUPPER
	RET

// Q4_K: y = d·sc·q − dmin·m per sub-block; d·sc·q is exact in float32, so one VFMSUB rounds
// exactly as float32(d1·q) − m1 does.
#define DQ4KGROUP(K) \
	VPMOVZXBD   (8*K)(R11), Y12; \
	VPAND       Y15, Y12, Y13; \
	VPSRLD      $4, Y12, Y12; \
	VCVTDQ2PS   Y13, Y13; \
	VCVTDQ2PS   Y12, Y12; \
	VFMSUB213PS Y9, Y8, Y13; \
	VFMSUB213PS Y11, Y10, Y12; \
	VMOVUPS     Y13, (32*K)(DI); \
	VMOVUPS     Y12, (128+32*K)(DI)

// func dequantQ4_KAVX2(row *byte, y *float32, nblocks int)
TEXT ·dequantQ4_KAVX2(SB), NOSPLIT, $80-24
	MOVQ         row+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         nblocks+16(FP), CX
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
	DQ4KGROUP(0)
	DQ4KGROUP(1)
	DQ4KGROUP(2)
	DQ4KGROUP(3)
	ADDQ         $32, R11
	ADDQ         $256, DI
	INCQ         R10
	CMPQ         R10, $4
	JLT          chunk

	ADDQ $144, SI
	DECQ CX
	JNZ  block

done:
	VZEROUPPER
	RET

// Q6_K: y = (d·sc)·(q − 32), in ggml's order. The bit layout is the one dot_amd64.s
// describes for dotQ6_KAVX2.
#define DQ6KGROUP(QL, QH, YOFF, S) \
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
	VMOVUPS      Y7, (YOFF)(DI); \
	VMOVUPS      Y8, (YOFF+128)(DI); \
	VMOVUPS      Y4, (YOFF+256)(DI); \
	VMOVUPS      Y5, (YOFF+384)(DI)

// func dequantQ6_KAVX2(row *byte, y *float32, nblocks int)
//
// Frame: 0(SP) the 16 float scales d·sc.
TEXT ·dequantQ6_KAVX2(SB), NOSPLIT, $64-24
	MOVQ         row+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         nblocks+16(FP), CX
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

	// DQ6KGROUP(ql offset, qh offset, y byte offset, first scale index)
	DQ6KGROUP(0, 128, 0, 0)
	DQ6KGROUP(8, 136, 32, 0)
	DQ6KGROUP(16, 144, 64, 1)
	DQ6KGROUP(24, 152, 96, 1)
	DQ6KGROUP(64, 160, 512, 8)
	DQ6KGROUP(72, 168, 544, 8)
	DQ6KGROUP(80, 176, 576, 9)
	DQ6KGROUP(88, 184, 608, 9)

	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  block

done:
	VZEROUPPER
	RET

// IQ2_XXS: per 32-element sub-block db = d·(0.5 + s)·0.25, then y = db·grid, negated where
// the sign pattern says (ggml multiplies by −1, which flips the sign bit alike). Grid and
// sign tables come pre-widened from Go, as for dotIQ2_XXSAVX2.
#define DIQ2XXSGROUP(L, SHIFT) \
	MOVBLZX L(R11), AX; \
	SHLQ    $5, AX; \
	MOVL    BX, DX; \
	SHRL    $SHIFT, DX; \
	ANDL    $127, DX; \
	SHLQ    $5, DX; \
	VMULPS  (R12)(AX*1), Y6, Y4; \
	VXORPS  (R13)(DX*1), Y4, Y4; \
	VMOVUPS Y4, (32*L)(DI)

// func dequantIQ2_XXSAVX2(row *byte, y *float32, nblocks int, grid *[256][8]float32, signs *[128][8]uint32)
TEXT ·dequantIQ2_XXSAVX2(SB), NOSPLIT, $0-40
	MOVQ  row+0(FP), SI
	MOVQ  y+8(FP), DI
	MOVQ  nblocks+16(FP), CX
	MOVQ  grid+24(FP), R12
	MOVQ  signs+32(FP), R13
	MOVL  $0x3f000000, AX // 0.5
	VMOVD AX, X7
	MOVL  $0x3e800000, AX // 0.25
	VMOVD AX, X9
	TESTQ CX, CX
	JZ    done

block:
	VPBROADCASTW (SI), X8
	VCVTPH2PS    X8, X8
	LEAQ         2(SI), R11
	XORQ         R10, R10

sub:
	MOVL         4(R11), BX
	MOVL         BX, AX
	SHRL         $28, AX
	VCVTSI2SSL   AX, X6, X6
	VADDSS       X7, X6, X6
	VMULSS       X6, X8, X6
	VMULSS       X9, X6, X6
	VBROADCASTSS X6, Y6
	DIQ2XXSGROUP(0, 0)
	DIQ2XXSGROUP(1, 7)
	DIQ2XXSGROUP(2, 14)
	DIQ2XXSGROUP(3, 21)
	ADDQ         $8, R11
	ADDQ         $128, DI
	INCQ         R10
	CMPQ         R10, $8
	JLT          sub

	ADDQ $66, SI
	DECQ CX
	JNZ  block

done:
	VZEROUPPER
	RET

// F16: every half widens exactly.
// func dequantF16AVX2(h *byte, y *float32, n int); n is a multiple of 32.
TEXT ·dequantF16AVX2(SB), NOSPLIT, $0-24
	MOVQ  h+0(FP), SI
	MOVQ  y+8(FP), DI
	MOVQ  n+16(FP), CX
	SHRQ  $5, CX
	JZ    done

loop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VCVTPH2PS 32(SI), Y2
	VCVTPH2PS 48(SI), Y3
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	VMOVUPS   Y2, 64(DI)
	VMOVUPS   Y3, 96(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET

// The other way: VCVTPS2PH with rounding mode 0 (to nearest, ties to even) narrows as
// F32ToF16 does, subnormals and NaN payloads included (TestF32ToF16SliceAsm).
// func narrowF16AVX2(y *float32, h *uint16, n int); n is a multiple of 16.
TEXT ·narrowF16AVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), SI
	MOVQ h+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   narrowdone

narrowloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (DI)
	VMOVDQU   X1, 16(DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       narrowloop

narrowdone:
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// Vectorised e^x for the softmax of attention and for SwiGLU, AVX-512. The method is
// Cephes' expf: n = round(x·log2 e), r = x − n·ln 2 in two parts, e^r by a degree-7
// polynomial, then VSCALEFPS multiplies by 2^n (overflowing to +Inf and underflowing to 0
// as e^x does). The error is within 2 ulp of the rounded e^x over the float32 range.

DATA expConst<>+0(SB)/4, $0x3fb8aa3b  // log2 e
DATA expConst<>+4(SB)/4, $0x3f318000  // ln 2, high part 0.693359375
DATA expConst<>+8(SB)/4, $0xb95e8083  // ln 2, low part −2.12194440e−4
DATA expConst<>+12(SB)/4, $0x39506967 // 1.9875691500e−4
DATA expConst<>+16(SB)/4, $0x3ab743ce // 1.3981999507e−3
DATA expConst<>+20(SB)/4, $0x3c088908 // 8.3334519073e−3
DATA expConst<>+24(SB)/4, $0x3d2aa9c1 // 4.1665795894e−2
DATA expConst<>+28(SB)/4, $0x3e2aaaaa // 1.6666665459e−1
DATA expConst<>+32(SB)/4, $0x3f000000 // 5.0000001201e−1
DATA expConst<>+36(SB)/4, $0x3f800000 // 1
DATA expConst<>+40(SB)/4, $0xc3160000 // −150: below it e^x is 0 in float32
DATA expConst<>+44(SB)/4, $0x43160000 // 150: above it e^x is +Inf
GLOBL expConst<>(SB), RODATA|NOPTR, $48

#define EXPCONSTS \
	MOVQ         $expConst<>(SB), AX; \
	VBROADCASTSS 0(AX), Z20; \
	VBROADCASTSS 4(AX), Z21; \
	VBROADCASTSS 8(AX), Z22; \
	VBROADCASTSS 12(AX), Z23; \
	VBROADCASTSS 16(AX), Z24; \
	VBROADCASTSS 20(AX), Z25; \
	VBROADCASTSS 24(AX), Z26; \
	VBROADCASTSS 28(AX), Z27; \
	VBROADCASTSS 32(AX), Z28; \
	VBROADCASTSS 36(AX), Z29; \
	VBROADCASTSS 40(AX), Z18; \
	VBROADCASTSS 44(AX), Z19

// EXP sets Y = e^X (Z registers); X is clobbered, T is a temporary.
#define EXP(X, Y, T) \
	VMAXPS       Z18, X, X; \
	VMINPS       Z19, X, X; \
	VMULPS       Z20, X, Y; \
	VRNDSCALEPS  $0, Y, Y; \
	VFNMADD231PS Z21, Y, X; \
	VFNMADD231PS Z22, Y, X; \
	VMOVAPS      Z23, T; \
	VFMADD213PS  Z24, X, T; \
	VFMADD213PS  Z25, X, T; \
	VFMADD213PS  Z26, X, T; \
	VFMADD213PS  Z27, X, T; \
	VFMADD213PS  Z28, X, T; \
	VMULPS       X, T, T; \
	VFMADD213PS  X, X, T; \
	VADDPS       Z29, T, T; \
	VSCALEFPS    Y, T, Y

// func softmaxAVX512(x *float32, n int, scale float32)
//
// Three passes over the row, which is in L1: the maximum m of x; e = e^(x·scale − m·scale)
// and their sum in float64; then e·float32(1/sum). n ≥ 1.
TEXT ·softmaxAVX512(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS scale+16(FP), Z16
	EXPCONSTS

	// The tail mask K1 (all ones when n is a multiple of 16) and the count of whole vectors.
	MOVQ  CX, R9
	ANDQ  $15, CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	TESTQ CX, CX
	JNZ   masked
	MOVL  $0xffff, AX

masked:
	KMOVW AX, K1
	MOVQ  R9, DX
	SUBQ  $1, DX
	SHRQ  $4, DX // whole vectors before the last (possibly partial) one

	// Pass 1: maximum.
	MOVL         $0xff800000, AX // −Inf
	VPBROADCASTD AX, Z0
	MOVQ         SI, DI
	MOVQ         DX, R8
	TESTQ        R8, R8
	JZ           max_tail

max_loop:
	VMAXPS (DI), Z0, Z0
	ADDQ   $64, DI
	DECQ   R8
	JNZ    max_loop

max_tail:
	VMAXPS        (DI), Z0, K1, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VMULSS        X16, X0, X0
	VBROADCASTSS  X0, Z17

	// Pass 2: exponentials and their sum.
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	MOVQ   SI, DI
	MOVQ   DX, R8
	TESTQ  R8, R8
	JZ     exp_tail

exp_loop:
	VMULPS        (DI), Z16, Z2
	VSUBPS        Z17, Z2, Z2
	EXP(Z2, Z3, Z4)
	VMOVUPS       Z3, (DI)
	VCVTPS2PD     Y3, Z5
	VEXTRACTF64X4 $1, Z3, Y6
	VCVTPS2PD     Y6, Z6
	VADDPD        Z5, Z0, Z0
	VADDPD        Z6, Z1, Z1
	ADDQ          $64, DI
	DECQ          R8
	JNZ           exp_loop

exp_tail:
	VMOVUPS.Z     (DI), K1, Z2
	VMULPS        Z16, Z2, Z2
	VSUBPS        Z17, Z2, Z2
	EXP(Z2, Z3, Z4)
	VMOVUPS.Z     Z3, K1, Z3
	VMOVUPS       Z3, K1, (DI)
	VCVTPS2PD     Y3, Z5
	VEXTRACTF64X4 $1, Z3, Y6
	VCVTPS2PD     Y6, Z6
	VADDPD        Z5, Z0, Z0
	VADDPD        Z6, Z1, Z1

	VADDPD        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPD        X1, X0, X0
	VHADDPD       X0, X0, X0
	MOVQ          $0x3ff0000000000000, AX // 1.0
	VMOVQ         AX, X1
	VDIVSD        X0, X1, X0
	VCVTSD2SS     X0, X0, X0
	VBROADCASTSS  X0, Z17

	// Pass 3: normalise.
	MOVQ  SI, DI
	MOVQ  DX, R8
	TESTQ R8, R8
	JZ    norm_tail

norm_loop:
	VMULPS  (DI), Z17, Z2
	VMOVUPS Z2, (DI)
	ADDQ    $64, DI
	DECQ    R8
	JNZ     norm_loop

norm_tail:
	VMULPS  (DI), Z17, K1, Z2
	VMOVUPS Z2, K1, (DI)
	VZEROUPPER
	RET

// SWIGLU16 computes silu(g)·u = g/(1 + e^−g)·u for the 16 lanes loaded into Z2 (g) and
// Z8 (u), into Z9.
#define SWIGLU16 \
	VMOVAPS Z2, Z7; \
	VPXORD  Z16, Z2, Z2; \
	EXP(Z2, Z3, Z4); \
	VADDPS  Z29, Z3, Z3; \
	VDIVPS  Z3, Z7, Z9; \
	VMULPS  Z8, Z9, Z9

// func swigluAVX512(out, gate, up *float32, n int)
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ         out+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), DX
	MOVQ         n+24(FP), CX
	EXPCONSTS
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z16
	CMPQ         CX, $16
	JLT          tail

loop:
	VMOVUPS (SI), Z2
	VMOVUPS (DX), Z8
	SWIGLU16
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	CMPQ    CX, $16
	JGE     loop

tail:
	TESTQ     CX, CX
	JZ        done
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K1
	VMOVUPS.Z (SI), K1, Z2
	VMOVUPS.Z (DX), K1, Z8
	SWIGLU16
	VMOVUPS   Z9, K1, (DI)

done:
	VZEROUPPER
	RET

// func dotStridedAVX512(a *float32, lda int, x *float32, n, rows int, out *float32)
//
// out[r] = Σ_{i<n} a[r·lda+i]·x[i] for r < rows; n is a multiple of 16. Attention scores of
// one query against the keys of a cache (rows are positions, lda skips the other heads).
TEXT ·dotStridedAVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R8
	SHLQ $2, R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), DX
	SHRQ $4, DX
	MOVQ rows+32(FP), R11
	MOVQ out+40(FP), BX
	TESTQ R11, R11
	JZ    done

row:
	LEAQ       (SI)(R8*4), R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	PREFETCHT0 128(R12)
	PREFETCHT0 192(R12)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	MOVQ   SI, R9
	MOVQ   DI, R10
	MOVQ   DX, CX
	CMPQ   CX, $2
	JLT    one

two:
	VMOVUPS     (R9), Z2
	VMOVUPS     64(R9), Z3
	VFMADD231PS (R10), Z2, Z0
	VFMADD231PS 64(R10), Z3, Z1
	ADDQ        $128, R9
	ADDQ        $128, R10
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         two

one:
	TESTQ       CX, CX
	JZ          sum
	VMOVUPS     (R9), Z2
	VFMADD231PS (R10), Z2, Z0

sum:
	VADDPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	VMOVSS        X0, (BX)
	ADDQ          $4, BX
	ADDQ          R8, SI
	DECQ          R11
	JNZ           row

done:
	VZEROUPPER
	RET

// func weightedRowsAVX512(w *float32, rows int, a *float32, lda int, out *float32)
//
// out[i] = Σ_{r<rows} w[r]·a[r·lda+i] for i < 128, summed in r order: attention's
// probability-weighted sum of one head's values, the 128 outputs held in eight registers.
TEXT ·weightedRowsAVX512(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   rows+8(FP), CX
	MOVQ   a+16(FP), DI
	MOVQ   lda+24(FP), R8
	SHLQ   $2, R8
	MOVQ   out+32(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ  CX, CX
	JZ     store

loop:
	LEAQ         (DI)(R8*4), R12
	PREFETCHT0   (R12)
	PREFETCHT0   64(R12)
	VBROADCASTSS (SI), Z8
	VFMADD231PS  (DI), Z8, Z0
	VFMADD231PS  64(DI), Z8, Z1
	VFMADD231PS  128(DI), Z8, Z2
	VFMADD231PS  192(DI), Z8, Z3
	VFMADD231PS  256(DI), Z8, Z4
	VFMADD231PS  320(DI), Z8, Z5
	VFMADD231PS  384(DI), Z8, Z6
	VFMADD231PS  448(DI), Z8, Z7
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          loop

store:
	VMOVUPS Z0, (BX)
	VMOVUPS Z1, 64(BX)
	VMOVUPS Z2, 128(BX)
	VMOVUPS Z3, 192(BX)
	VMOVUPS Z4, 256(BX)
	VMOVUPS Z5, 320(BX)
	VMOVUPS Z6, 384(BX)
	VMOVUPS Z7, 448(BX)
	VZEROUPPER
	RET

// TAILMASK sets K1 to the low CX&15 lanes (all 16 when CX is a multiple of 16) and DX to
// the number of whole vectors before the last one; CX ≥ 1. Clobbers AX, R9.
#define TAILMASK \
	MOVQ  CX, R9; \
	ANDQ  $15, CX; \
	MOVL  $1, AX; \
	SHLL  CX, AX; \
	DECL  AX; \
	TESTQ CX, CX; \
	JNZ   2(PC); \
	MOVL  $0xffff, AX; \
	KMOVW AX, K1; \
	MOVQ  R9, DX; \
	SUBQ  $1, DX; \
	SHRQ  $4, DX

// func sumSquaresAVX512(x *float32, n int) float64
//
// Σ float64(x·x): squares rounded to float32 as in ggml's rms_norm, summed in float64 lanes.
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	TAILMASK
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	TESTQ  DX, DX
	JZ     last

loop:
	VMOVUPS       (SI), Z2
	VMULPS        Z2, Z2, Z2
	VCVTPS2PD     Y2, Z3
	VEXTRACTF64X4 $1, Z2, Y4
	VCVTPS2PD     Y4, Z4
	VADDPD        Z3, Z0, Z0
	VADDPD        Z4, Z1, Z1
	ADDQ          $64, SI
	DECQ          DX
	JNZ           loop

last:
	VMOVUPS.Z     (SI), K1, Z2
	VMULPS        Z2, Z2, Z2
	VCVTPS2PD     Y2, Z3
	VEXTRACTF64X4 $1, Z2, Y4
	VCVTPS2PD     Y4, Z4
	VADDPD        Z3, Z0, Z0
	VADDPD        Z4, Z1, Z1

	VADDPD        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPD        X1, X0, X0
	VHADDPD       X0, X0, X0
	VMOVSD        X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleRowAVX512(dst, src *float32, n int, s float32, w *float32)
//
// dst = (src·s)·w, or src·s when w is nil; n ≥ 1.
TEXT ·scaleRowAVX512(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Z5
	MOVQ         w+32(FP), BX
	TAILMASK
	TESTQ        BX, BX
	JZ           plain
	TESTQ        DX, DX
	JZ           wlast

wloop:
	VMULPS  (SI), Z5, Z2
	VMULPS  (BX), Z2, Z2
	VMOVUPS Z2, (DI)
	ADDQ    $64, SI
	ADDQ    $64, BX
	ADDQ    $64, DI
	DECQ    DX
	JNZ     wloop

wlast:
	VMOVUPS.Z (SI), K1, Z2
	VMOVUPS.Z (BX), K1, Z3
	VMULPS    Z5, Z2, Z2
	VMULPS    Z3, Z2, Z2
	VMOVUPS   Z2, K1, (DI)
	VZEROUPPER
	RET

plain:
	TESTQ DX, DX
	JZ    plast

ploop:
	VMULPS  (SI), Z5, Z2
	VMOVUPS Z2, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    DX
	JNZ     ploop

plast:
	VMOVUPS.Z (SI), K1, Z2
	VMULPS    Z5, Z2, Z2
	VMOVUPS   Z2, K1, (DI)
	VZEROUPPER
	RET

// func siluAVX512(out, x *float32, n int)
//
// out = x/(1 + e^−x), as swigluAVX512 without the factor; n ≥ 1.
TEXT ·siluAVX512(SB), NOSPLIT, $0-24
	MOVQ         out+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	EXPCONSTS
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z16
	TAILMASK
	TESTQ        DX, DX
	JZ           last

loop:
	VMOVUPS (SI), Z2
	VMOVAPS Z2, Z7
	VPXORD  Z16, Z2, Z2
	EXP(Z2, Z3, Z4)
	VADDPS  Z29, Z3, Z3
	VDIVPS  Z3, Z7, Z9
	VMOVUPS Z9, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    DX
	JNZ     loop

last:
	VMOVUPS.Z (SI), K1, Z2
	VMOVAPS   Z2, Z7
	VPXORD    Z16, Z2, Z2
	EXP(Z2, Z3, Z4)
	VADDPS    Z29, Z3, Z3
	VDIVPS    Z3, Z7, Z9
	VMOVUPS   Z9, K1, (DI)
	VZEROUPPER
	RET

// func dotStridedF16AVX512(a *uint16, lda int, x *float32, n, rows int, out *float32)
//
// dotStridedAVX512 over rows of float16 bits (an f16 KV cache's keys), each widened in the
// register that the float32 kernel loads: the same sums, bit for bit, as that kernel over
// the widened rows, without writing them anywhere.
TEXT ·dotStridedF16AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R8
	SHLQ $1, R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), DX
	SHRQ $4, DX
	MOVQ rows+32(FP), R11
	MOVQ out+40(FP), BX
	TESTQ R11, R11
	JZ    done

row:
	LEAQ       (SI)(R8*4), R12
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	PREFETCHT0 128(R12)
	PREFETCHT0 192(R12)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	MOVQ   SI, R9
	MOVQ   DI, R10
	MOVQ   DX, CX
	CMPQ   CX, $2
	JLT    one

two:
	VCVTPH2PS   (R9), Z2
	VCVTPH2PS   32(R9), Z3
	VFMADD231PS (R10), Z2, Z0
	VFMADD231PS 64(R10), Z3, Z1
	ADDQ        $64, R9
	ADDQ        $128, R10
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         two

one:
	TESTQ       CX, CX
	JZ          sum
	VCVTPH2PS   (R9), Z2
	VFMADD231PS (R10), Z2, Z0

sum:
	VADDPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	VMOVSS        X0, (BX)
	ADDQ          $4, BX
	ADDQ          R8, SI
	DECQ          R11
	JNZ           row

done:
	VZEROUPPER
	RET

// func weightedRowsF16AVX512(w *float32, rows int, a *uint16, lda int, out *float32)
//
// weightedRowsAVX512 over rows of float16 bits (an f16 KV cache's values), widened in
// registers: bit for bit that kernel's sums over the widened rows.
TEXT ·weightedRowsF16AVX512(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   rows+8(FP), CX
	MOVQ   a+16(FP), DI
	MOVQ   lda+24(FP), R8
	SHLQ   $1, R8
	MOVQ   out+32(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ  CX, CX
	JZ     store

loop:
	LEAQ         (DI)(R8*4), R12
	PREFETCHT0   (R12)
	PREFETCHT0   64(R12)
	VBROADCASTSS (SI), Z8
	VCVTPH2PS    (DI), Z9
	VCVTPH2PS    32(DI), Z10
	VCVTPH2PS    64(DI), Z11
	VCVTPH2PS    96(DI), Z12
	VCVTPH2PS    128(DI), Z13
	VCVTPH2PS    160(DI), Z14
	VCVTPH2PS    192(DI), Z15
	VCVTPH2PS    224(DI), Z16
	VFMADD231PS  Z9, Z8, Z0
	VFMADD231PS  Z10, Z8, Z1
	VFMADD231PS  Z11, Z8, Z2
	VFMADD231PS  Z12, Z8, Z3
	VFMADD231PS  Z13, Z8, Z4
	VFMADD231PS  Z14, Z8, Z5
	VFMADD231PS  Z15, Z8, Z6
	VFMADD231PS  Z16, Z8, Z7
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          loop

store:
	VMOVUPS Z0, (BX)
	VMOVUPS Z1, 64(BX)
	VMOVUPS Z2, 128(BX)
	VMOVUPS Z3, 192(BX)
	VMOVUPS Z4, 256(BX)
	VMOVUPS Z5, 320(BX)
	VMOVUPS Z6, 384(BX)
	VMOVUPS Z7, 448(BX)
	VZEROUPPER
	RET

// The AVX2 forms of the strided kernels, for CPUs without AVX-512. DOTSTRIDED and
// WEIGHTEDROWS are their bodies, with LOAD the load of 8 values: float32 rows load as they
// are, f16 rows widen in the register, so that the f16 kernels give bit for bit what the
// float32 ones give over the widened rows. Every strided kernel prefetches the row four
// ahead (512 bytes of it: a 256-value f16 key): a kv head's rows lie kvHeads·headDim values apart, a stride the hardware
// prefetcher follows too late, and decode at depth waited on memory.

#define LOADF32(off, base, Y) VMOVUPS off(base), Y
#define LOADF16(off, base, Y) VCVTPH2PS off(base), Y

// func dotStridedAVX2(a *float32, lda int, x *float32, n, rows int, out *float32)
//
// out[r] = a[r·lda : r·lda+n] · x for r < rows; n is a multiple of 8. Four accumulators of
// 8 lanes take 32 values per step, then 8 at a time.
#define DOTSTRIDED(LOAD, E32, E8) \
	TESTQ R11, R11; \
	JZ    done; \
row: \
	LEAQ        (SI)(R8*4), R12; \
	PREFETCHT0  (R12); \
	PREFETCHT0  64(R12); \
	PREFETCHT0  128(R12); \
	PREFETCHT0  192(R12); \
	PREFETCHT0  256(R12); \
	PREFETCHT0  320(R12); \
	PREFETCHT0  384(R12); \
	PREFETCHT0  448(R12); \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	MOVQ   SI, R9; \
	MOVQ   DI, R10; \
	MOVQ   DX, CX; \
	CMPQ   CX, $32; \
	JLT    eight; \
four: \
	LOAD(0, R9, Y4); \
	LOAD(E8, R9, Y5); \
	LOAD(2*E8, R9, Y6); \
	LOAD(3*E8, R9, Y7); \
	VFMADD231PS (R10), Y4, Y0; \
	VFMADD231PS 32(R10), Y5, Y1; \
	VFMADD231PS 64(R10), Y6, Y2; \
	VFMADD231PS 96(R10), Y7, Y3; \
	ADDQ        E32, R9; \
	ADDQ        $128, R10; \
	SUBQ        $32, CX; \
	CMPQ        CX, $32; \
	JGE         four; \
eight: \
	TESTQ       CX, CX; \
	JZ          sum; \
	LOAD(0, R9, Y4); \
	VFMADD231PS (R10), Y4, Y0; \
	ADDQ        $E8, R9; \
	ADDQ        $32, R10; \
	SUBQ        $8, CX; \
	JMP         eight; \
sum: \
	VADDPS       Y1, Y0, Y0; \
	VADDPS       Y3, Y2, Y2; \
	VADDPS       Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VMOVSS       X0, (BX); \
	ADDQ         $4, BX; \
	ADDQ         R8, SI; \
	DECQ         R11; \
	JNZ          row; \
done: \
	VZEROUPPER; \
	RET

TEXT ·dotStridedAVX2(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R8
	SHLQ $2, R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), DX
	MOVQ rows+32(FP), R11
	MOVQ out+40(FP), BX
	DOTSTRIDED(LOADF32, $128, 32)

// func dotStridedF16AVX2(a *uint16, lda int, x *float32, n, rows int, out *float32)
TEXT ·dotStridedF16AVX2(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R8
	SHLQ $1, R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), DX
	MOVQ rows+32(FP), R11
	MOVQ out+40(FP), BX
	DOTSTRIDED(LOADF16, $64, 16)

// func weightedRowsAVX2(w *float32, rows int, a *float32, lda int, out *float32, n int)
//
// out[i] = Σ_{r<rows} w[r]·a[r·lda+i] for i < n, summed in r order; n is a multiple of 64.
// The outputs go by 64, held in eight registers while the rows go by.
#define WEIGHTEDROWS(LOAD, E8) \
	SHRQ $6, DX; \
chunk: \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	MOVQ   SI, R9; \
	MOVQ   DI, R10; \
	MOVQ   CX, R11; \
	TESTQ  R11, R11; \
	JZ     store; \
loop: \
	LEAQ         (R10)(R8*4), R12; \
	PREFETCHT0   (R12); \
	PREFETCHT0   64(R12); \
	VBROADCASTSS (R9), Y8; \
	LOAD(0, R10, Y9); \
	LOAD(E8, R10, Y10); \
	LOAD(2*E8, R10, Y11); \
	LOAD(3*E8, R10, Y12); \
	VFMADD231PS  Y9, Y8, Y0; \
	VFMADD231PS  Y10, Y8, Y1; \
	VFMADD231PS  Y11, Y8, Y2; \
	VFMADD231PS  Y12, Y8, Y3; \
	LOAD(4*E8, R10, Y9); \
	LOAD(5*E8, R10, Y10); \
	LOAD(6*E8, R10, Y11); \
	LOAD(7*E8, R10, Y12); \
	VFMADD231PS  Y9, Y8, Y4; \
	VFMADD231PS  Y10, Y8, Y5; \
	VFMADD231PS  Y11, Y8, Y6; \
	VFMADD231PS  Y12, Y8, Y7; \
	ADDQ         $4, R9; \
	ADDQ         R8, R10; \
	DECQ         R11; \
	JNZ          loop; \
store: \
	VMOVUPS Y0, (BX); \
	VMOVUPS Y1, 32(BX); \
	VMOVUPS Y2, 64(BX); \
	VMOVUPS Y3, 96(BX); \
	VMOVUPS Y4, 128(BX); \
	VMOVUPS Y5, 160(BX); \
	VMOVUPS Y6, 192(BX); \
	VMOVUPS Y7, 224(BX); \
	ADDQ    $256, BX; \
	ADDQ    $(8*E8), DI; \
	DECQ    DX; \
	JNZ     chunk; \
	VZEROUPPER; \
	RET

TEXT ·weightedRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ a+16(FP), DI
	MOVQ lda+24(FP), R8
	SHLQ $2, R8
	MOVQ out+32(FP), BX
	MOVQ n+40(FP), DX
	WEIGHTEDROWS(LOADF32, 32)

// func weightedRowsF16AVX2(w *float32, rows int, a *uint16, lda int, out *float32, n int)
TEXT ·weightedRowsF16AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ a+16(FP), DI
	MOVQ lda+24(FP), R8
	SHLQ $1, R8
	MOVQ out+32(FP), BX
	MOVQ n+40(FP), DX
	WEIGHTEDROWS(LOADF16, 16)

// The AVX2 forms of the row kernels, for CPUs without AVX-512. AVX2 has neither mask
// registers nor VSCALEFPS nor VRNDSCALEPS: tails go through VMASKMOVPS with a mask from
// tailMask8<>, n is rounded by VROUNDPS, and 2^n is applied as two factors 2^n1·2^n2
// (n1 = n>>1, n2 = n − n1), each built in the exponent field. Both factors are normal for
// |n| ≤ 216 (the clamp to ±150), p·2^n1 is exact, so the one rounding is that of p·2^n: the
// same result as VSCALEFPS, bit for bit, including the overflow to +Inf and the gradual
// underflow through the denormals to 0.

// Eight lanes on then eight off: the 32 bytes at +4(8−r) switch on the low r lanes.
DATA tailMask8<>+0(SB)/8, $0xffffffffffffffff
DATA tailMask8<>+8(SB)/8, $0xffffffffffffffff
DATA tailMask8<>+16(SB)/8, $0xffffffffffffffff
DATA tailMask8<>+24(SB)/8, $0xffffffffffffffff
DATA tailMask8<>+32(SB)/8, $0
DATA tailMask8<>+40(SB)/8, $0
DATA tailMask8<>+48(SB)/8, $0
DATA tailMask8<>+56(SB)/8, $0
GLOBL tailMask8<>(SB), RODATA|NOPTR, $64

// TAILMASK8 sets R10 to the address of the mask of the last vector's lanes, ((CX−1)&7)+1
// of them (all 8 when CX is a multiple of 8), and DX to the number of whole vectors before
// it; CX ≥ 1. Clobbers R9. The last vector always goes through the mask so that no kernel
// touches memory past the end of its rows.
#define TAILMASK8 \
	LEAQ -1(CX), DX; \
	MOVQ DX, R9; \
	SHRQ $3, DX; \
	ANDQ $7, R9; \
	NEGQ R9; \
	LEAQ tailMask8<>+28(SB), R10; \
	LEAQ (R10)(R9*4), R10

// EXPCONSTS8 holds in registers the constants EXP8 uses on every instruction; the
// polynomial's coefficients, each used once, are broadcast from expConst<> (AX) as they
// are needed, there being too few Y registers for all of them. Clobbers R11.
#define EXPCONSTS8 \
	MOVQ         $expConst<>(SB), AX; \
	VBROADCASTSS 40(AX), Y6; \
	VBROADCASTSS 44(AX), Y7; \
	VBROADCASTSS 0(AX), Y8; \
	VBROADCASTSS 4(AX), Y9; \
	VBROADCASTSS 8(AX), Y10; \
	VBROADCASTSS 36(AX), Y11; \
	MOVL         $127, R11; \
	VMOVD        R11, X5; \
	VPBROADCASTD X5, Y5

// EXP8 sets Y = e^X (Y registers), EXP's steps in the same order; X is clobbered, T and U
// are temporaries.
#define EXP8(X, Y, T, U) \
	VMAXPS       Y6, X, X; \
	VMINPS       Y7, X, X; \
	VMULPS       Y8, X, Y; \
	VROUNDPS     $0, Y, Y; \
	VFNMADD231PS Y9, Y, X; \
	VFNMADD231PS Y10, Y, X; \
	VBROADCASTSS 12(AX), T; \
	VBROADCASTSS 16(AX), U; \
	VFMADD213PS  U, X, T; \
	VBROADCASTSS 20(AX), U; \
	VFMADD213PS  U, X, T; \
	VBROADCASTSS 24(AX), U; \
	VFMADD213PS  U, X, T; \
	VBROADCASTSS 28(AX), U; \
	VFMADD213PS  U, X, T; \
	VBROADCASTSS 32(AX), U; \
	VFMADD213PS  U, X, T; \
	VMULPS       X, T, T; \
	VFMADD213PS  X, X, T; \
	VADDPS       Y11, T, T; \
	VCVTPS2DQ    Y, Y; \
	VPSRAD       $1, Y, U; \
	VPSUBD       U, Y, Y; \
	VPADDD       Y5, U, U; \
	VPSLLD       $23, U, U; \
	VPADDD       Y5, Y, Y; \
	VPSLLD       $23, Y, Y; \
	VMULPS       U, T, T; \
	VMULPS       Y, T, Y

// func softmaxAVX2(x *float32, n int, scale float32)
//
// softmaxAVX512's three passes, eight lanes at a time; n ≥ 1.
TEXT ·softmaxAVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y15
	TAILMASK8

	// Pass 1: maximum. The masked load reads 0 in the lanes past the end, which must not
	// take part: VBLENDVPS puts the running maximum there instead.
	MOVL         $0xff800000, R11 // −Inf
	VMOVD        R11, X0
	VPBROADCASTD X0, Y0
	MOVQ         SI, DI
	MOVQ         DX, R8
	TESTQ        R8, R8
	JZ           max_tail

max_loop:
	VMAXPS (DI), Y0, Y0
	ADDQ   $32, DI
	DECQ   R8
	JNZ    max_loop

max_tail:
	VMOVDQU      (R10), Y4
	VMASKMOVPS   (DI), Y4, Y1
	VBLENDVPS    Y4, Y1, Y0, Y1
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMULSS       X15, X0, X0
	VBROADCASTSS X0, Y14

	// Pass 2: exponentials and their sum.
	EXPCONSTS8
	VXORPD Y12, Y12, Y12
	VXORPD Y13, Y13, Y13
	MOVQ   SI, DI
	MOVQ   DX, R8
	TESTQ  R8, R8
	JZ     exp_tail

exp_loop:
	VMULPS       (DI), Y15, Y0
	VSUBPS       Y14, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VMOVUPS      Y1, (DI)
	VCVTPS2PD    X1, Y4
	VEXTRACTF128 $1, Y1, X1
	VCVTPS2PD    X1, Y1
	VADDPD       Y4, Y12, Y12
	VADDPD       Y1, Y13, Y13
	ADDQ         $32, DI
	DECQ         R8
	JNZ          exp_loop

exp_tail:
	VMOVDQU      (R10), Y4
	VMASKMOVPS   (DI), Y4, Y0
	VMULPS       Y15, Y0, Y0
	VSUBPS       Y14, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VANDPS       Y4, Y1, Y1 // the lanes past the end out of the sum
	VMASKMOVPS   Y1, Y4, (DI)
	VCVTPS2PD    X1, Y4
	VEXTRACTF128 $1, Y1, X1
	VCVTPS2PD    X1, Y1
	VADDPD       Y4, Y12, Y12
	VADDPD       Y1, Y13, Y13

	VADDPD       Y13, Y12, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VHADDPD      X0, X0, X0
	MOVQ         $0x3ff0000000000000, R11 // 1.0
	VMOVQ        R11, X1
	VDIVSD       X0, X1, X0
	VCVTSD2SS    X0, X0, X0
	VBROADCASTSS X0, Y14

	// Pass 3: normalise.
	MOVQ  SI, DI
	MOVQ  DX, R8
	TESTQ R8, R8
	JZ    norm_tail

norm_loop:
	VMULPS  (DI), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	DECQ    R8
	JNZ     norm_loop

norm_tail:
	VMOVDQU    (R10), Y4
	VMASKMOVPS (DI), Y4, Y0
	VMULPS     Y14, Y0, Y0
	VMASKMOVPS Y0, Y4, (DI)
	VZEROUPPER
	RET

// SILU8 sets Y13 = silu(Y0) = Y0/(1 + e^−Y0), Y15 holding the sign bit in every lane.
#define SILU8 \
	VXORPS Y15, Y0, Y14; \
	EXP8(Y14, Y1, Y2, Y3); \
	VADDPS Y11, Y1, Y1; \
	VDIVPS Y1, Y0, Y13

// func swigluAVX2(out, gate, up *float32, n int)
//
// out = silu(gate)·up; n ≥ 1.
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ         out+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), BX
	MOVQ         n+24(FP), CX
	TAILMASK8
	EXPCONSTS8
	MOVL         $0x80000000, R11
	VMOVD        R11, X15
	VPBROADCASTD X15, Y15
	TESTQ        DX, DX
	JZ           last

loop:
	VMOVUPS (SI), Y0
	SILU8
	VMULPS  (BX), Y13, Y13
	VMOVUPS Y13, (DI)
	ADDQ    $32, SI
	ADDQ    $32, BX
	ADDQ    $32, DI
	DECQ    DX
	JNZ     loop

last:
	VMOVDQU    (R10), Y4
	VMASKMOVPS (SI), Y4, Y0
	VMASKMOVPS (BX), Y4, Y12
	SILU8
	VMULPS     Y12, Y13, Y13
	VMASKMOVPS Y13, Y4, (DI)
	VZEROUPPER
	RET

// func siluAVX2(out, x *float32, n int)
//
// out = x/(1 + e^−x); n ≥ 1.
TEXT ·siluAVX2(SB), NOSPLIT, $0-24
	MOVQ         out+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	TAILMASK8
	EXPCONSTS8
	MOVL         $0x80000000, R11
	VMOVD        R11, X15
	VPBROADCASTD X15, Y15
	TESTQ        DX, DX
	JZ           last

loop:
	VMOVUPS (SI), Y0
	SILU8
	VMOVUPS Y13, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    DX
	JNZ     loop

last:
	VMOVDQU    (R10), Y4
	VMASKMOVPS (SI), Y4, Y0
	SILU8
	VMASKMOVPS Y13, Y4, (DI)
	VZEROUPPER
	RET

// SQUARES8 adds the squares of the eight floats in Y4, rounded to float32 and widened,
// to the float64 sums A (low four lanes) and B (high four); Y4 is clobbered, T is a
// temporary.
#define SQUARES8(A, B, T) \
	VMULPS       Y4, Y4, Y4; \
	VCVTPS2PD    X4, T; \
	VEXTRACTF128 $1, Y4, X4; \
	VCVTPS2PD    X4, Y4; \
	VADDPD       T, A, A; \
	VADDPD       Y4, B, B

// func sumSquaresAVX2(x *float32, n int) float64
//
// Σ float64(x·x) as sumSquaresAVX512; two vectors a step into four sums, so that the
// additions' latency does not set the pace.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	TAILMASK8
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	MOVQ   DX, R8
	SHRQ   $1, R8
	JZ     one

two:
	VMOVUPS (SI), Y4
	SQUARES8(Y0, Y1, Y5)
	VMOVUPS 32(SI), Y4
	SQUARES8(Y2, Y3, Y5)
	ADDQ    $64, SI
	DECQ    R8
	JNZ     two

one:
	TESTQ   $1, DX
	JZ      last
	VMOVUPS (SI), Y4
	SQUARES8(Y0, Y1, Y5)
	ADDQ    $32, SI

last:
	VMOVDQU    (R10), Y6
	VMASKMOVPS (SI), Y6, Y4
	SQUARES8(Y2, Y3, Y5)

	VADDPD       Y1, Y0, Y0
	VADDPD       Y3, Y2, Y2
	VADDPD       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VHADDPD      X0, X0, X0
	VMOVSD       X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleRowAVX2(dst, src *float32, n int, s float32, w *float32)
//
// dst = (src·s)·w, or src·s when w is nil; n ≥ 1.
TEXT ·scaleRowAVX2(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Y5
	MOVQ         w+32(FP), BX
	TAILMASK8
	TESTQ        BX, BX
	JZ           plain
	TESTQ        DX, DX
	JZ           wlast

wloop:
	VMULPS  (SI), Y5, Y0
	VMULPS  (BX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, BX
	ADDQ    $32, DI
	DECQ    DX
	JNZ     wloop

wlast:
	VMOVDQU    (R10), Y4
	VMASKMOVPS (SI), Y4, Y0
	VMASKMOVPS (BX), Y4, Y1
	VMULPS     Y5, Y0, Y0
	VMULPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y4, (DI)
	VZEROUPPER
	RET

plain:
	TESTQ DX, DX
	JZ    plast

ploop:
	VMULPS  (SI), Y5, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    DX
	JNZ     ploop

plast:
	VMOVDQU    (R10), Y4
	VMASKMOVPS (SI), Y4, Y0
	VMULPS     Y5, Y0, Y0
	VMASKMOVPS Y0, Y4, (DI)
	VZEROUPPER
	RET

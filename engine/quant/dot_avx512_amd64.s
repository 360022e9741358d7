//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// AVX-512 versions of the block dot kernels of dot_amd64.s: the same arithmetic (each weight
// rebuilt exactly as ggml dequantizes it, then one FMA with x), sixteen lanes at a time. On
// a decode step the weights stream from memory once; these kernels do half the instructions
// per byte of the AVX2 ones, so that the memory bus, not the core, sets the pace.

// Sum the sixteen lanes of Z0 into X0's low float.
#define HSUM512 \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS        Y1, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0; \
	VHADDPS       X0, X0, X0; \
	VHADDPS       X0, X0, X0

// Q8BLOCK512 adds d·Σ q·x of the block at OFF(SI), against x at XOFF(DI), to ACC.
#define Q8BLOCK512(OFF, XOFF, ACC) \
	VPBROADCASTW OFF(SI), Y8; \
	VCVTPH2PS    Y8, Z8; \
	VPMOVSXBD    (OFF+2)(SI), Z4; \
	VPMOVSXBD    (OFF+18)(SI), Z5; \
	VCVTDQ2PS    Z4, Z4; \
	VCVTDQ2PS    Z5, Z5; \
	VMULPS       XOFF(DI), Z4, Z4; \
	VFMADD231PS  (XOFF+64)(DI), Z5, Z4; \
	VFMADD231PS  Z8, Z4, ACC

// func dotQ8_0AVX512(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ8_0AVX512(SB), NOSPLIT, $0-28
	MOVQ   row+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ   CX, $4
	JLT    tail

loop4:
	Q8BLOCK512(0, 0, Z0)
	Q8BLOCK512(34, 128, Z1)
	Q8BLOCK512(68, 256, Z2)
	Q8BLOCK512(102, 384, Z3)
	ADDQ $136, SI
	ADDQ $512, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4

tail:
	TESTQ CX, CX
	JZ    done

loop1:
	Q8BLOCK512(0, 0, Z0)
	ADDQ $34, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop1

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q4K512 handles bytes 16H..16H+15 of the current 32-byte chunk (R11): low nibbles are
// elements 16H.. of sub-block 2j (x at DI), high nibbles of sub-block 2j+1 (x at DI+128).
#define Q4K512(H, ACCLO, ACCHI) \
	VPMOVZXBD   (16*H)(R11), Z12; \
	VPANDD      Z15, Z12, Z13; \
	VPSRLD      $4, Z12, Z12; \
	VCVTDQ2PS   Z13, Z13; \
	VCVTDQ2PS   Z12, Z12; \
	VFMSUB213PS Z9, Z8, Z13; \
	VFMSUB213PS Z11, Z10, Z12; \
	VFMADD231PS (64*H)(DI), Z13, ACCLO; \
	VFMADD231PS (128+64*H)(DI), Z12, ACCHI

// func dotQ4_KAVX512(row *byte, x *float32, nblocks int) float32
TEXT ·dotQ4_KAVX512(SB), NOSPLIT, $80-28
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3
	MOVL         $0x0f, AX
	VPBROADCASTD AX, Z15
	TESTQ        CX, CX
	JZ           done

block:
	KSCALES

	XORQ R10, R10
	LEAQ 16(SI), R11

chunk:
	VBROADCASTSS 16(SP)(R10*8), Z8
	VBROADCASTSS 48(SP)(R10*8), Z9
	VBROADCASTSS 20(SP)(R10*8), Z10
	VBROADCASTSS 52(SP)(R10*8), Z11
	Q4K512(0, Z0, Z2)
	Q4K512(1, Z1, Z3)
	ADDQ         $32, R11
	ADDQ         $256, DI
	INCQ         R10
	CMPQ         R10, $4
	JLT          chunk

	ADDQ $144, SI
	DECQ CX
	JNZ  block

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q6K512 handles l = L..L+15 of the current half (one scale group per output vector): ql
// at QL, qh at QH, x at XOFF; S is the byte offset of the group's first scale d·sc.
#define Q6K512(QL, QH, XOFF, S) \
	VPMOVZXBD    (QL)(SI), Z4; \
	VPMOVZXBD    (QL+32)(SI), Z5; \
	VPMOVZXBD    (QH)(SI), Z6; \
	VPANDD       Z15, Z4, Z7; \
	VPSLLD       $4, Z6, Z8; \
	VPANDD       Z14, Z8, Z8; \
	VPORD        Z8, Z7, Z7; \
	VPANDD       Z15, Z5, Z8; \
	VPSLLD       $2, Z6, Z9; \
	VPANDD       Z14, Z9, Z9; \
	VPORD        Z9, Z8, Z8; \
	VPSRLD       $4, Z4, Z4; \
	VPANDD       Z14, Z6, Z9; \
	VPORD        Z9, Z4, Z4; \
	VPSRLD       $4, Z5, Z5; \
	VPSRLD       $2, Z6, Z6; \
	VPANDD       Z14, Z6, Z6; \
	VPORD        Z6, Z5, Z5; \
	VPSUBD       Z13, Z7, Z7; \
	VPSUBD       Z13, Z8, Z8; \
	VPSUBD       Z13, Z4, Z4; \
	VPSUBD       Z13, Z5, Z5; \
	VCVTDQ2PS    Z7, Z7; \
	VCVTDQ2PS    Z8, Z8; \
	VCVTDQ2PS    Z4, Z4; \
	VCVTDQ2PS    Z5, Z5; \
	VMULPS.BCST  (S)(SP), Z7, Z7; \
	VMULPS.BCST  (S+8)(SP), Z8, Z8; \
	VMULPS.BCST  (S+16)(SP), Z4, Z4; \
	VMULPS.BCST  (S+24)(SP), Z5, Z5; \
	VFMADD231PS  (XOFF)(DI), Z7, Z0; \
	VFMADD231PS  (XOFF+128)(DI), Z8, Z1; \
	VFMADD231PS  (XOFF+256)(DI), Z4, Z2; \
	VFMADD231PS  (XOFF+384)(DI), Z5, Z3

// func dotQ6_KAVX512(row *byte, x *float32, nblocks int) float32
//
// Frame: 0(SP) the 16 float scales d·sc.
TEXT ·dotQ6_KAVX512(SB), NOSPLIT, $64-28
	MOVQ         row+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nblocks+16(FP), CX
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3
	MOVL         $0x0f, AX
	VPBROADCASTD AX, Z15
	MOVL         $0x30, AX
	VPBROADCASTD AX, Z14
	MOVL         $32, AX
	VPBROADCASTD AX, Z13
	TESTQ        CX, CX
	JZ           done

block:
	VPBROADCASTW 208(SI), Y4
	VCVTPH2PS    Y4, Z4
	VPMOVSXBD    192(SI), Z5
	VCVTDQ2PS    Z5, Z5
	VMULPS       Z4, Z5, Z5
	VMOVUPS      Z5, 0(SP)

	// Q6K512(ql offset, qh offset, x byte offset, scale byte offset)
	Q6K512(0, 128, 0, 0)
	Q6K512(16, 144, 64, 4)
	Q6K512(64, 160, 512, 32)
	Q6K512(80, 176, 576, 36)

	ADDQ $210, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  block

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

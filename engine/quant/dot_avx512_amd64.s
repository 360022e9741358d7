//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// AVX-512 versions of the block dot kernels of dot_amd64.s: the same arithmetic (each weight
// rebuilt exactly as ggml dequantizes it, then one FMA with x), sixteen lanes at a time. On
// a decode step the weights stream from memory once; these kernels do half the instructions
// per byte of the AVX2 ones, so that the memory bus, not the core, sets the pace.

// KSCALES512 does what KSCALES does for the block at SRC, storing the 8 d·scale and then 8
// dmin·min at DST, with byte
// shuffles instead of a chain of scalar operations, which had been a third of the kernel's
// time. Bytes s0..s11 at 4(SI): lanes 0-3 take s0-3 & 63, lanes 4-7 s8-11 & 15 with s0-3 >> 6
// on top, lanes 8-11 s4-7 & 63, lanes 12-15 s8-11 >> 4 with s4-7 >> 6 on top. Z17 must hold
// kqHalves.
#define KSCALES512(SRC, DST) \
	VMOVDQU       4(SRC), X4; \
	VPSHUFB       kqShufA<>(SB), X4, X5; \
	VPSHUFB       kqShufB<>(SB), X4, X6; \
	VPAND         kqMaskLo<>(SB), X5, X7; \
	VPSRLW        $4, X5, X5; \
	VPAND         kqMaskHi<>(SB), X5, X5; \
	VPSRLW        $6, X6, X6; \
	VPAND         kqMask3<>(SB), X6, X6; \
	VPSLLW        $4, X6, X6; \
	VPOR          X5, X7, X7; \
	VPOR          X6, X7, X7; \
	VPMOVZXBD     X7, Z4; \
	VCVTDQ2PS     Z4, Z4; \
	VPBROADCASTD  (SRC), X5; \
	VCVTPH2PS     X5, Y5; \
	VPERMPS       Z5, Z17, Z5; \
	VMULPS        Z5, Z4, Z4; \
	VMOVUPS       Z4, (DST)

DATA kqShufA<>+0(SB)/8, $0x0b0a090803020100
DATA kqShufA<>+8(SB)/8, $0x0b0a090807060504
GLOBL kqShufA<>(SB), RODATA|NOPTR, $16
DATA kqShufB<>+0(SB)/8, $0x0302010080808080
DATA kqShufB<>+8(SB)/8, $0x0706050480808080
GLOBL kqShufB<>(SB), RODATA|NOPTR, $16
DATA kqMaskLo<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA kqMaskLo<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL kqMaskLo<>(SB), RODATA|NOPTR, $16
DATA kqMaskHi<>+0(SB)/8, $0x0000000000000000
DATA kqMaskHi<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL kqMaskHi<>(SB), RODATA|NOPTR, $16
DATA kqMask3<>+0(SB)/8, $0x0303030303030303
DATA kqMask3<>+8(SB)/8, $0x0303030303030303
GLOBL kqMask3<>(SB), RODATA|NOPTR, $16

// kqHalves picks d (lane 0) for lanes 0-7 and dmin (lane 1) for lanes 8-15.
DATA kqHalves<>+0(SB)/8, $0
DATA kqHalves<>+8(SB)/8, $0
DATA kqHalves<>+16(SB)/8, $0
DATA kqHalves<>+24(SB)/8, $0
DATA kqHalves<>+32(SB)/8, $0x0000000100000001
DATA kqHalves<>+40(SB)/8, $0x0000000100000001
DATA kqHalves<>+48(SB)/8, $0x0000000100000001
DATA kqHalves<>+56(SB)/8, $0x0000000100000001
GLOBL kqHalves<>(SB), RODATA|NOPTR, $64

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

// func dotQ8_0RowsAVX512(rows *byte, x *float32, nblocks, nrows int, out *float32)
//
// out[r] = Σ over the nblocks blocks of row r (rows are contiguous) with x.
TEXT ·dotQ8_0RowsAVX512(SB), NOSPLIT, $0-40
	MOVQ rows+0(FP), SI
	MOVQ x+8(FP), R10
	MOVQ nblocks+16(FP), DX
	MOVQ nrows+24(FP), R11
	MOVQ out+32(FP), BX

row:
	MOVQ   R10, DI
	MOVQ   DX, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ   CX, $4
	JLT    tail

loop4:
	// 1 KiB ahead, as dotQ8_0AVX2: the 136 bytes of an iteration touch two or three lines.
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
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
	VMOVSS X0, (BX)
	ADDQ   $4, BX
	DECQ   R11
	JNZ    row
	VZEROUPPER
	RET

// Q4_K: a sub-block's 4-bit values pick one of only sixteen weights, d1·q − m1, so each
// chunk builds the two sub-blocks' tables (one FMSUB on 0..15 each, rounded exactly as the
// weights themselves are) and looks weights up with VPERMPS, which reads the low four bits
// of each dword lane: no masking, conversion or FMSUB per weight.

// Q4KTABLES builds the tables of sub-blocks 2J and 2J+1 into Z8 and Z9 from the scales at
// R13.
#define Q4KTABLES(J) \
	VBROADCASTSS     (32+8*J)(R13), Z8; \
	VFMSUB231PS.BCST (8*J)(R13), Z16, Z8; \
	VBROADCASTSS     (36+8*J)(R13), Z9; \
	VFMSUB231PS.BCST (4+8*J)(R13), Z16, Z9

// Q4KHALF handles bytes 16H..16H+15 of chunk J: low nibbles are elements 64J+16H+l, high
// nibbles 64J+32+16H+l.
#define Q4KHALF(J, H, ACCLO, ACCHI) \
	VPMOVZXBD   (16+32*J+16*H)(SI), Z12; \
	VPSRLD      $4, Z12, Z13; \
	VPERMPS     Z8, Z12, Z12; \
	VPERMPS     Z9, Z13, Z13; \
	VFMADD231PS (256*J+64*H)(DI), Z12, ACCLO; \
	VFMADD231PS (256*J+128+64*H)(DI), Z13, ACCHI

// func dotQ4_KRowsAVX512(rows *byte, x *float32, nblocks, nrows, group int, out *float32)
//
// The blocks of all rows are taken in groups of group blocks (group divides nblocks, at most
// 4). The scales of group g+1 are unpacked to the frame before group g is multiplied, so
// that a block's scale loads never wait on the stores just issued for them (that wait had
// cost a third of the kernel's time).
//
// Frame: two buffers of 4 × 64 bytes of scales (per block 8 d·scale, then 8 dmin·min).
TEXT ·dotQ4_KRowsAVX512(SB), NOSPLIT, $512-48
	MOVQ    rows+0(FP), SI
	MOVQ    x+8(FP), R10
	MOVQ    nblocks+16(FP), AX
	MOVQ    nrows+24(FP), R11
	MOVQ    group+32(FP), DX
	MOVQ    out+40(FP), BX
	MOVQ    $iota16<>(SB), CX
	VMOVUPS (CX), Z16
	MOVQ    $kqHalves<>(SB), CX
	VMOVUPS (CX), Z17

	// R12 = groups per row, R11 = groups in all, R15 = groups left in this row.
	XORQ  R12, R12
	TESTQ DX, DX
	JZ    empty
	MOVQ  AX, CX
	MOVQ  DX, R13
	MOVQ  AX, R12
	XORQ  DX, DX
	MOVQ  R12, AX
	DIVQ  R13
	MOVQ  AX, R12
	MOVQ  R13, DX
	TESTQ R12, R12
	JZ    empty
	IMULQ R12, R11
	MOVQ  R12, R15

	LEAQ 0(SP), R8   // scales of the current group
	LEAQ 256(SP), R9 // scales of the next group
	MOVQ SI, R14     // next block to unpack
	MOVQ R8, R13
	MOVQ DX, CX

first:
	KSCALES512(R14, R13)
	ADDQ $144, R14
	ADDQ $64, R13
	DECQ CX
	JNZ  first

	MOVQ R10, DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

group:
	CMPQ R11, $1
	JLE  process
	MOVQ R9, R13
	MOVQ DX, CX

ahead:
	KSCALES512(R14, R13)
	ADDQ $144, R14
	ADDQ $64, R13
	DECQ CX
	JNZ  ahead

process:
	MOVQ R8, R13
	MOVQ DX, CX

block:
	Q4KTABLES(0)
	Q4KHALF(0, 0, Z0, Z1)
	Q4KHALF(0, 1, Z2, Z3)
	Q4KTABLES(1)
	Q4KHALF(1, 0, Z20, Z21)
	Q4KHALF(1, 1, Z22, Z23)
	Q4KTABLES(2)
	Q4KHALF(2, 0, Z0, Z1)
	Q4KHALF(2, 1, Z2, Z3)
	Q4KTABLES(3)
	Q4KHALF(3, 0, Z20, Z21)
	Q4KHALF(3, 1, Z22, Z23)
	ADDQ $144, SI
	ADDQ $1024, DI
	ADDQ $64, R13
	DECQ CX
	JNZ  block

	XCHGQ R8, R9
	DECQ  R15
	JNZ   next

	// End of a row.
	VADDPS Z20, Z0, Z0
	VADDPS Z21, Z1, Z1
	VADDPS Z22, Z2, Z2
	VADDPS Z23, Z3, Z3
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, (BX)
	ADDQ   $4, BX
	MOVQ   R10, DI
	MOVQ   R12, R15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

next:
	DECQ R11
	JNZ  group

empty:
	VZEROUPPER
	RET

// iota16 is 0, 1, …, 15 as floats.
DATA iota16<>+0(SB)/4, $0x00000000
DATA iota16<>+4(SB)/4, $0x3f800000
DATA iota16<>+8(SB)/4, $0x40000000
DATA iota16<>+12(SB)/4, $0x40400000
DATA iota16<>+16(SB)/4, $0x40800000
DATA iota16<>+20(SB)/4, $0x40a00000
DATA iota16<>+24(SB)/4, $0x40c00000
DATA iota16<>+28(SB)/4, $0x40e00000
DATA iota16<>+32(SB)/4, $0x41000000
DATA iota16<>+36(SB)/4, $0x41100000
DATA iota16<>+40(SB)/4, $0x41200000
DATA iota16<>+44(SB)/4, $0x41300000
DATA iota16<>+48(SB)/4, $0x41400000
DATA iota16<>+52(SB)/4, $0x41500000
DATA iota16<>+56(SB)/4, $0x41600000
DATA iota16<>+60(SB)/4, $0x41700000
GLOBL iota16<>(SB), RODATA|NOPTR, $64

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
	VMULPS.BCST  (S)(R8), Z7, Z7; \
	VMULPS.BCST  (S+8)(R8), Z8, Z8; \
	VMULPS.BCST  (S+16)(R8), Z4, Z4; \
	VMULPS.BCST  (S+24)(R8), Z5, Z5; \
	VFMADD231PS  (XOFF)(DI), Z7, Z0; \
	VFMADD231PS  (XOFF+128)(DI), Z8, Z1; \
	VFMADD231PS  (XOFF+256)(DI), Z4, Z2; \
	VFMADD231PS  (XOFF+384)(DI), Z5, Z3

// Q6KSCALES stores the 16 scales d·sc of the block at SRC to DST.
#define Q6KSCALES(SRC, DST) \
	VPBROADCASTW 208(SRC), Y4; \
	VCVTPH2PS    Y4, Z4; \
	VPMOVSXBD    192(SRC), Z5; \
	VCVTDQ2PS    Z5, Z5; \
	VMULPS       Z4, Z5, Z5; \
	VMOVUPS      Z5, (DST)

// func dotQ6_KRowsAVX512(rows *byte, x *float32, nblocks, nrows int, out *float32)
//
// The blocks of all rows form one sequence; the next block's scales are stored before the
// current block is multiplied, so its scale loads never wait on a store just issued.
// Frame: two buffers of 16 float scales.
TEXT ·dotQ6_KRowsAVX512(SB), NOSPLIT, $128-40
	MOVQ         rows+0(FP), SI
	MOVQ         x+8(FP), R10
	MOVQ         nblocks+16(FP), DX
	MOVQ         nrows+24(FP), R11
	MOVQ         out+32(FP), BX
	MOVL         $0x0f, AX
	VPBROADCASTD AX, Z15
	MOVL         $0x30, AX
	VPBROADCASTD AX, Z14
	MOVL         $32, AX
	VPBROADCASTD AX, Z13
	TESTQ        DX, DX
	JZ           empty
	IMULQ        DX, R11 // blocks in all
	TESTQ        R11, R11
	JZ           empty
	MOVQ         DX, R12 // blocks left in this row
	LEAQ         0(SP), R8
	LEAQ         64(SP), R9
	Q6KSCALES(SI, R8)
	MOVQ         R10, DI
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3

block:
	CMPQ R11, $1
	JLE  process
	LEAQ 210(SI), AX
	Q6KSCALES(AX, R9)

process:
	// Q6K512(ql offset, qh offset, x byte offset, scale byte offset)
	Q6K512(0, 128, 0, 0)
	Q6K512(16, 144, 64, 4)
	Q6K512(64, 160, 512, 32)
	Q6K512(80, 176, 576, 36)

	ADDQ  $210, SI
	ADDQ  $1024, DI
	XCHGQ R8, R9
	DECQ  R12
	JNZ   next

	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM512
	VMOVSS X0, (BX)
	ADDQ   $4, BX
	MOVQ   R10, DI
	MOVQ   DX, R12
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

next:
	DECQ R11
	JNZ  block

empty:
	VZEROUPPER
	RET

// Q8TOK adds d·Σ q·x for one token: the block's q are in Z4 (low 16) and Z5 (high 16), d in
// Z8, the token's x at XLO and XHI; T is scratch. It is Q8BLOCK512's arithmetic exactly.
#define Q8TOK(XLO, XHI, T, ACC) \
	VMULPS      XLO, Z4, T; \
	VFMADD231PS XHI, Z5, T; \
	VFMADD231PS Z8, T, ACC

// Q8BLOCKX4 converts the block at OFF(SI) once and adds it, against x at XOFF of each of four
// tokens (DI, DI+R13, DI+2·R13, DI+R14), to A0..A3.
#define Q8BLOCKX4(OFF, XOFF, A0, A1, A2, A3) \
	VPBROADCASTW OFF(SI), Y8; \
	VCVTPH2PS    Y8, Z8; \
	VPMOVSXBD    (OFF+2)(SI), Z4; \
	VPMOVSXBD    (OFF+18)(SI), Z5; \
	VCVTDQ2PS    Z4, Z4; \
	VCVTDQ2PS    Z5, Z5; \
	Q8TOK(XOFF(DI), (XOFF+64)(DI), Z6, A0); \
	Q8TOK(XOFF(DI)(R13*1), (XOFF+64)(DI)(R13*1), Z7, A1); \
	Q8TOK(XOFF(DI)(R13*2), (XOFF+64)(DI)(R13*2), Z9, A2); \
	Q8TOK(XOFF(DI)(R14*1), (XOFF+64)(DI)(R14*1), Z10, A3)

// Q8SUM sums a token's four accumulators as dotQ8_0RowsAVX512 does its Z0..Z3, and stores
// the float at DST.
#define Q8SUM(A0, A1, A2, A3, DST) \
	VADDPS A1, A0, A0; \
	VADDPS A3, A2, A2; \
	VADDPS A2, A0, Z0; \
	HSUM512; \
	VMOVSS X0, DST

// func dotQ8_0Rows4AVX512(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)
//
// Four tokens at once: out[i·ostride + r] = row r · x[i·xstride …] for i < 4 (strides in
// floats). Each block is converted once for the four; every token's sum is computed exactly
// as dotQ8_0RowsAVX512 computes it alone, so a decode step of several sequences gives each
// the numbers it gets alone.
TEXT ·dotQ8_0Rows4AVX512(SB), NOSPLIT, $0-56
	MOVQ rows+0(FP), SI
	MOVQ x+8(FP), R10
	MOVQ xstride+16(FP), R13
	SHLQ $2, R13
	LEAQ (R13)(R13*2), R14
	MOVQ nblocks+24(FP), DX
	MOVQ nrows+32(FP), R11
	MOVQ out+40(FP), BX
	MOVQ ostride+48(FP), R12
	SHLQ $2, R12
	LEAQ (R12)(R12*2), R8

row4:
	MOVQ   R10, DI
	MOVQ   DX, CX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	CMPQ   CX, $4
	JLT    tail4

loop4x4:
	Q8BLOCKX4(0, 0, Z16, Z20, Z24, Z28)
	Q8BLOCKX4(34, 128, Z17, Z21, Z25, Z29)
	Q8BLOCKX4(68, 256, Z18, Z22, Z26, Z30)
	Q8BLOCKX4(102, 384, Z19, Z23, Z27, Z31)
	ADDQ $136, SI
	ADDQ $512, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4x4

tail4:
	TESTQ CX, CX
	JZ    done4

loop1x4:
	Q8BLOCKX4(0, 0, Z16, Z20, Z24, Z28)
	ADDQ $34, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop1x4

done4:
	Q8SUM(Z16, Z17, Z18, Z19, (BX))
	Q8SUM(Z20, Z21, Z22, Z23, (BX)(R12*1))
	Q8SUM(Z24, Z25, Z26, Z27, (BX)(R12*2))
	Q8SUM(Z28, Z29, Z30, Z31, (BX)(R8*1))
	ADDQ   $4, BX
	DECQ   R11
	JNZ    row4
	VZEROUPPER
	RET

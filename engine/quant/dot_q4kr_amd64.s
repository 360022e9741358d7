//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// Q4_K × Q8K over the repacked layout (repack.go): sixteen rows interleaved, so that each
// 32-bit lane of a ZMM register belongs to one row and nothing is summed across lanes.
// VPDPBUSD multiplies four bytes of sixteen rows by four activation bytes broadcast from
// memory and adds to the row's int32 lane: 64 multiply-adds in one µop, where the
// row-major kernels need VPMADDUBSW and VPMADDWD/VPDPWSSD for as many (and the 512-bit
// integer multiplies issue on one port, so µops on it are the cost). A sub-block's sums
// are multiplied by its sixteen scales once (VPMULLD), the mins term is VPDPWSSD of the
// mins, each twice as int16, with pairs of the activations' Bsums. Then, per lane, the
// float step of the Go kernel in its order: d = half·D, sum += d·float32(sumi) −
// dmin·float32(mins); so the results are bit for bit dotQ4_KQ8KGo's.
//
// Group-block (2,368 bytes, one block of sixteen rows): d[16] f16 at 0, dmin[16] f16 at
// 32, scales[8][16] bytes at 64, mins[8][16] at 192, then at 320 for chunk j (0–3) and
// quad g (0–7) 64 bytes: row r's bytes 4g…4g+3 of its chunk j (low nibbles elements
// 64j+4g…, high nibbles 64j+32+4g…).

#define Q8K_SIZE 324
#define Q4R_BLOCK 2368

// sumPairShuf: VPSHUFB control taking each lane's bytes 0, 1, 2 to 0, 2, 3 and zeroing
// byte 1: the int32 s becomes the int16 pair (s & 255, s >> 8) for |s| < 2^23, which
// VPDPWSSD with (sc, 256·sc) turns into sc·s (the Q6_K kernels use it too).
DATA ·sumPairShuf+0(SB)/8, $0x0605800402018000
DATA ·sumPairShuf+8(SB)/8, $0x0e0d800c0a098008
GLOBL ·sumPairShuf(SB), RODATA|NOPTR, $16

// scalePairLo, scalePairHi: VPERMB indexes putting row r's scale byte of the chunk's low
// (bytes 0–15) or high (16–31) sub-block in bytes 0 and 3 of lane r; K1 (0x9…9) zeroes
// bytes 1 and 2, so the lane is the int16 pair (sc, 256·sc) (the Q5_K kernel uses them too).
DATA ·scalePairLo+0(SB)/4, $0x00000000
DATA ·scalePairLo+4(SB)/4, $0x01000001
DATA ·scalePairLo+8(SB)/4, $0x02000002
DATA ·scalePairLo+12(SB)/4, $0x03000003
DATA ·scalePairLo+16(SB)/4, $0x04000004
DATA ·scalePairLo+20(SB)/4, $0x05000005
DATA ·scalePairLo+24(SB)/4, $0x06000006
DATA ·scalePairLo+28(SB)/4, $0x07000007
DATA ·scalePairLo+32(SB)/4, $0x08000008
DATA ·scalePairLo+36(SB)/4, $0x09000009
DATA ·scalePairLo+40(SB)/4, $0x0a00000a
DATA ·scalePairLo+44(SB)/4, $0x0b00000b
DATA ·scalePairLo+48(SB)/4, $0x0c00000c
DATA ·scalePairLo+52(SB)/4, $0x0d00000d
DATA ·scalePairLo+56(SB)/4, $0x0e00000e
DATA ·scalePairLo+60(SB)/4, $0x0f00000f
GLOBL ·scalePairLo(SB), RODATA|NOPTR, $64

DATA ·scalePairHi+0(SB)/4, $0x10000010
DATA ·scalePairHi+4(SB)/4, $0x11000011
DATA ·scalePairHi+8(SB)/4, $0x12000012
DATA ·scalePairHi+12(SB)/4, $0x13000013
DATA ·scalePairHi+16(SB)/4, $0x14000014
DATA ·scalePairHi+20(SB)/4, $0x15000015
DATA ·scalePairHi+24(SB)/4, $0x16000016
DATA ·scalePairHi+28(SB)/4, $0x17000017
DATA ·scalePairHi+32(SB)/4, $0x18000018
DATA ·scalePairHi+36(SB)/4, $0x19000019
DATA ·scalePairHi+40(SB)/4, $0x1a00001a
DATA ·scalePairHi+44(SB)/4, $0x1b00001b
DATA ·scalePairHi+48(SB)/4, $0x1c00001c
DATA ·scalePairHi+52(SB)/4, $0x1d00001d
DATA ·scalePairHi+56(SB)/4, $0x1e00001e
DATA ·scalePairHi+60(SB)/4, $0x1f00001f
GLOBL ·scalePairHi(SB), RODATA|NOPTR, $64

// Q4RQUAD4(J, G): quad G of chunk J for four tokens: Z20 the low nibbles, Z21 the high
// ones, into Z12–Z15 and Z16–Z19.
#define Q4RQUAD4(J, G) \
	VMOVDQU64     (320+512*J+64*G)(SI), Z21; \
	VPANDD        Z24, Z21, Z20; \
	VPSRLW        $4, Z21, Z21; \
	VPANDD        Z24, Z21, Z21; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z20, Z12; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R8*1), Z20, Z13; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R8*2), Z20, Z14; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R9*1), Z20, Z15; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z21, Z16; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R8*1), Z21, Z17; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R8*2), Z21, Z18; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R9*1), Z21, Z19

// Q4RSCALE(LO, HI, S): S += LO·Z22 + HI·Z23 (the two sub-blocks' scales), LO and HI
// cleared for the next chunk.
#define Q4RSCALE(LO, HI, S) \
	VPMULLD Z22, LO, LO; \
	VPMULLD Z23, HI, HI; \
	VPADDD  LO, S, S; \
	VPADDD  HI, S, S; \
	VPXORD  LO, LO, LO; \
	VPXORD  HI, HI, HI

// Q4RCHUNK4(J): chunk J of the group-block at SI for four tokens into Z4–Z7.
#define Q4RCHUNK4(J) \
	Q4RQUAD4(J, 0); \
	Q4RQUAD4(J, 1); \
	Q4RQUAD4(J, 2); \
	Q4RQUAD4(J, 3); \
	Q4RQUAD4(J, 4); \
	Q4RQUAD4(J, 5); \
	Q4RQUAD4(J, 6); \
	Q4RQUAD4(J, 7); \
	VPERMB.Z (64+32*J)(SI), Z9, K1, Z22; \
	VPERMB.Z (64+32*J)(SI), Z10, K1, Z23; \
	KRSCALEW(Z12, Z16, Z4); \
	KRSCALEW(Z13, Z17, Z5); \
	KRSCALEW(Z14, Z18, Z6); \
	KRSCALEW(Z15, Z19, Z7)

// Q4RMINS(K, ...): the block's min K as int16 pairs (m, m) in Z22, and M += m·Bsums pair
// K of each token (into Z12–Z15, which the chunks left cleared).
#define Q4RMINW(K) \
	VPMOVZXBD (192+16*K)(SI), Z22; \
	VPSLLD    $16, Z22, Z23; \
	VPORD     Z23, Z22, Z22

#define Q4RMINS4(K) \
	Q4RMINW(K); \
	VPDPWSSD.BCST (260+4*K)(DI), Z22, Z12; \
	VPDPWSSD.BCST (260+4*K)(DI)(R8*1), Z22, Z13; \
	VPDPWSSD.BCST (260+4*K)(DI)(R8*2), Z22, Z14; \
	VPDPWSSD.BCST (260+4*K)(DI)(R9*1), Z22, Z15

// Q4RFLOAT(M, S, MINS, F): token at M's float step: F += d·float32(S) − dmin·float32(MINS)
// with d = half(d)·D (Z25 the sixteen rows' d, Z26 their dmin, as floats). S and MINS are
// cleared for the next block.
#define Q4RFLOAT(M, S, MINS, F) \
	VMULPS.BCST M, Z25, Z27; \
	VMULPS.BCST M, Z26, Z28; \
	VCVTDQ2PS   S, Z29; \
	VCVTDQ2PS   MINS, Z30; \
	VMULPS      Z29, Z27, Z27; \
	VMULPS      Z30, Z28, Z28; \
	VSUBPS      Z28, Z27, Z27; \
	VADDPS      Z27, F, F; \
	VPXORD      S, S, S; \
	VPXORD      MINS, MINS, MINS

// Q4RD: the group-block's d and dmin as floats in Z25, Z26.
#define Q4RD \
	VCVTPH2PS (SI), Z25; \
	VCVTPH2PS 32(SI), Z26

// func dotQ4_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)
//
// Four tokens (a, a+nb, a+2nb, a+3nb blocks) against ngroups groups of sixteen rows; token
// i's result for row r at out[i·ldo + r].
// Registers: SI the group-block; DI token 0's block, R8 a token's bytes, R9 three tokens';
// Z0–Z3 the tokens' float sums, Z4–Z7 their sumi, Z12–Z19 the sub-blocks' sums (then the
// mins), Z24 the nibble mask.
TEXT ·dotQ4_KR16Q8K4VNNI(SB), NOSPLIT, $0-48
	MOVQ         packed+0(FP), SI
	MOVQ         ngroups+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVQ         ldo+40(FP), R14
	SHLQ         $2, R14
	LEAQ         (R14)(R14*2), R11
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z24
	VBROADCASTI32X4 ·sumPairShuf(SB), Z8
	VMOVDQU64    ·scalePairLo(SB), Z9
	VMOVDQU64    ·scalePairHi(SB), Z10
	MOVQ         $0x9999999999999999, AX
	KMOVQ        AX, K1
	MOVQ         nblocks+16(FP), R8
	IMUL3Q       $Q8K_SIZE, R8, R8
	LEAQ         (R8)(R8*2), R9
	VPXORD       Z4, Z4, Z4
	VPXORD       Z5, Z5, Z5
	VPXORD       Z6, Z6, Z6
	VPXORD       Z7, Z7, Z7
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z14, Z14, Z14
	VPXORD       Z15, Z15, Z15
	VPXORD       Z16, Z16, Z16
	VPXORD       Z17, Z17, Z17
	VPXORD       Z18, Z18, Z18
	VPXORD       Z19, Z19, Z19

q4r4group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

q4r4block:
	Q4RCHUNK4(0)
	Q4RCHUNK4(1)
	Q4RCHUNK4(2)
	Q4RCHUNK4(3)
	Q4RMINS4(0)
	Q4RMINS4(1)
	Q4RMINS4(2)
	Q4RMINS4(3)
	Q4RMINS4(4)
	Q4RMINS4(5)
	Q4RMINS4(6)
	Q4RMINS4(7)
	Q4RD
	Q4RFLOAT((DI), Z4, Z12, Z0)
	Q4RFLOAT((DI)(R8*1), Z5, Z13, Z1)
	Q4RFLOAT((DI)(R8*2), Z6, Z14, Z2)
	Q4RFLOAT((DI)(R9*1), Z7, Z15, Z3)

	ADDQ $Q4R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q4r4block

	VMOVUPS Z0, (R13)
	VMOVUPS Z1, (R13)(R14*1)
	VMOVUPS Z2, (R13)(R14*2)
	VMOVUPS Z3, (R13)(R11*1)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q4r4group
	VZEROUPPER
	RET

// Q4RQUAD1(J, G): Q4RQUAD4 for one token.
#define Q4RQUAD1(J, G) \
	VMOVDQU64     (320+512*J+64*G)(SI), Z21; \
	VPANDD        Z24, Z21, Z20; \
	VPSRLW        $4, Z21, Z21; \
	VPANDD        Z24, Z21, Z21; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z20, Z12; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z21, Z16

// Q4RCHUNK1(J): chunk J for one token into Z4; the quads alternate accumulators (Z12/Z13,
// Z16/Z17) to halve the chains of dependent VPDPBUSD.
#define Q4RQUAD1B(J, G) \
	VMOVDQU64     (320+512*J+64*G)(SI), Z9; \
	VPANDD        Z24, Z9, Z8; \
	VPSRLW        $4, Z9, Z9; \
	VPANDD        Z24, Z9, Z9; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z8, Z13; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z9, Z17

#define Q4RCHUNK1(J) \
	Q4RQUAD1(J, 0); \
	Q4RQUAD1B(J, 1); \
	Q4RQUAD1(J, 2); \
	Q4RQUAD1B(J, 3); \
	Q4RQUAD1(J, 4); \
	Q4RQUAD1B(J, 5); \
	Q4RQUAD1(J, 6); \
	Q4RQUAD1B(J, 7); \
	VPADDD    Z13, Z12, Z12; \
	VPADDD    Z17, Z16, Z16; \
	VPXORD    Z13, Z13, Z13; \
	VPXORD    Z17, Z17, Z17; \
	VPMOVZXBD (64+32*J)(SI), Z22; \
	VPMOVZXBD (80+32*J)(SI), Z23; \
	Q4RSCALE(Z12, Z16, Z4)

// Q4RPF(I, J): prefetch lines I…J−1 of the group-block 4 KiB ahead (37 lines: 2,368 bytes).
#define Q4RPF(I, J) \
	PREFETCHT0 (4096+64*I)(SI); \
	PREFETCHT0 (4096+64*I+64)(SI); \
	PREFETCHT0 (4096+64*I+128)(SI); \
	PREFETCHT0 (4096+64*I+192)(SI); \
	PREFETCHT0 (4096+64*I+256)(SI); \
	PREFETCHT0 (4096+64*I+320)(SI); \
	PREFETCHT0 (4096+64*I+384)(SI); \
	PREFETCHT0 (4096+64*I+448)(SI); \
	PREFETCHT0 (4096+64*I+512)(SI); \
	PREFETCHT0 (4096+64*J-64)(SI)

// func dotQ4_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)
//
// dotQ4_KR16Q8K4VNNI for one token, out[r] for row r. It prefetches the group-blocks
// 4 KiB ahead: one token streams the weights once, as the row-major kernels do.
TEXT ·dotQ4_KR16Q8KVNNI(SB), NOSPLIT, $0-40
	MOVQ         packed+0(FP), SI
	MOVQ         ngroups+24(FP), R12
	MOVQ         out+32(FP), R13
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z24
	VPXORD       Z4, Z4, Z4
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z16, Z16, Z16
	VPXORD       Z17, Z17, Z17

q4r1group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0

q4r1block:
	Q4RPF(0, 9)
	Q4RCHUNK1(0)
	Q4RPF(9, 18)
	Q4RCHUNK1(1)
	Q4RPF(18, 27)
	Q4RCHUNK1(2)
	Q4RPF(27, 37)
	Q4RCHUNK1(3)
	Q4RMINW(0)
	VPDPWSSD.BCST 260(DI), Z22, Z12
	Q4RMINW(1)
	VPDPWSSD.BCST 264(DI), Z22, Z12
	Q4RMINW(2)
	VPDPWSSD.BCST 268(DI), Z22, Z12
	Q4RMINW(3)
	VPDPWSSD.BCST 272(DI), Z22, Z12
	Q4RMINW(4)
	VPDPWSSD.BCST 276(DI), Z22, Z12
	Q4RMINW(5)
	VPDPWSSD.BCST 280(DI), Z22, Z12
	Q4RMINW(6)
	VPDPWSSD.BCST 284(DI), Z22, Z12
	Q4RMINW(7)
	VPDPWSSD.BCST 288(DI), Z22, Z12
	Q4RD
	Q4RFLOAT((DI), Z4, Z12, Z0)

	ADDQ $Q4R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q4r1block

	VMOVUPS Z0, (R13)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q4r1group
	VZEROUPPER
	RET

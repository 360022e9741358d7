//go:build amd64 && !purego

#include "textflag.h"
#include "kquant_amd64.h"

// Q5_K × Q8K over the repacked layout (repack.go), the kernels of dot_q4kr_amd64.s with a
// fifth bit: each chunk keeps, beside its nibbles, two 64-byte planes of high bits, one for
// the low nibbles' values and one for the high ones', bit g of row r's byte i the bit of
// quad g's byte i. VPROLD brings quad g's bit to bit 4 of every byte and VPTERNLOGD merges
// it into the nibbles (0…31, still unsigned for VPDPBUSD): four instructions per quad
// beside the eight (four tokens) VPDPBUSD. The rest, scales, mins and the float step, is
// the Q4_K kernels', so the results are bit for bit dotQ5_KQ8KGo's.
//
// Group-block (2,880 bytes, one block of sixteen rows): d[16] f16 at 0, dmin[16] f16 at
// 32, scales[8][16] bytes at 64, mins[8][16] at 192, then at 320 + 640j for chunk j
// (0–3): eight quads of 64 bytes, row r's bytes 4g…4g+3 of its chunk j at 64g + 4r, then
// the low nibbles' high-bit plane at 512 and the high nibbles' at 576.

#define Q8K_SIZE 324
#define Q5R_BLOCK 2880

// Q5RHI(J): chunk J's high-bit planes into Z10 (low nibbles) and Z11 (high ones).
#define Q5RHI(J) \
	VMOVDQU64 (320+640*J+512)(SI), Z10; \
	VMOVDQU64 (320+640*J+576)(SI), Z11

// Q5RVAL(J, G, LO, HI, T0, T1): quad G of chunk J as 5-bit values, the low nibbles' in
// LO, the high ones' in HI (T0, T1 scratch). Z24 holds bytes 0x0f, Z31 0x10;
// LO | (T & Z31) is VPTERNLOGD $0xf8.
#define Q5RVAL(J, G, LO, HI, T0, T1) \
	VMOVDQU64  (320+640*J+64*G)(SI), HI; \
	VPANDD     Z24, HI, LO; \
	VPSRLW     $4, HI, HI; \
	VPANDD     Z24, HI, HI; \
	VPROLD     $((4-G)&31), Z10, T0; \
	VPROLD     $((4-G)&31), Z11, T1; \
	VPTERNLOGD $0xf8, Z31, T0, LO; \
	VPTERNLOGD $0xf8, Z31, T1, HI

// Q5RQUAD4(J, G): quad G of chunk J for four tokens into Z12–Z15 and Z16–Z19.
#define Q5RQUAD4(J, G) \
	Q5RVAL(J, G, Z20, Z21, Z8, Z9); \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z20, Z12; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R8*1), Z20, Z13; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R8*2), Z20, Z14; \
	VPDPBUSD.BCST (4+64*J+4*G)(DI)(R9*1), Z20, Z15; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z21, Z16; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R8*1), Z21, Z17; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R8*2), Z21, Z18; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI)(R9*1), Z21, Z19

// Q5RSCALE(LO, HI, S): S += LO·Z22 + HI·Z23 (the two sub-blocks' scales), LO and HI
// cleared for the next chunk.
#define Q5RSCALE(LO, HI, S) \
	VPMULLD Z22, LO, LO; \
	VPMULLD Z23, HI, HI; \
	VPADDD  LO, S, S; \
	VPADDD  HI, S, S; \
	VPXORD  LO, LO, LO; \
	VPXORD  HI, HI, HI

// Q5RCHUNK4 scales as Q4RCHUNK4 (KRSCALEW), with Z8 and Z9, free between the quads, for
// the shuffle and the indexes.
// Q5RCHUNK4(J): chunk J of the group-block at SI for four tokens into Z4–Z7.
#define Q5RCHUNK4(J) \
	Q5RHI(J); \
	Q5RQUAD4(J, 0); \
	Q5RQUAD4(J, 1); \
	Q5RQUAD4(J, 2); \
	Q5RQUAD4(J, 3); \
	Q5RQUAD4(J, 4); \
	Q5RQUAD4(J, 5); \
	Q5RQUAD4(J, 6); \
	Q5RQUAD4(J, 7); \
	VMOVDQU64 ·scalePairLo(SB), Z9; \
	VPERMB.Z  (64+32*J)(SI), Z9, K1, Z22; \
	VMOVDQU64 ·scalePairHi(SB), Z9; \
	VPERMB.Z  (64+32*J)(SI), Z9, K1, Z23; \
	VBROADCASTI32X4 ·sumPairShuf(SB), Z8; \
	KRSCALEW(Z12, Z16, Z4); \
	KRSCALEW(Z13, Z17, Z5); \
	KRSCALEW(Z14, Z18, Z6); \
	KRSCALEW(Z15, Z19, Z7)

// Q5RMINW(K): the block's min K as int16 pairs (m, m) in Z22.
#define Q5RMINW(K) \
	VPMOVZXBD (192+16*K)(SI), Z22; \
	VPSLLD    $16, Z22, Z23; \
	VPORD     Z23, Z22, Z22

// Q5RMINS4(K): M += min K · Bsums pair K of each token (into Z12–Z15).
#define Q5RMINS4(K) \
	Q5RMINW(K); \
	VPDPWSSD.BCST (260+4*K)(DI), Z22, Z12; \
	VPDPWSSD.BCST (260+4*K)(DI)(R8*1), Z22, Z13; \
	VPDPWSSD.BCST (260+4*K)(DI)(R8*2), Z22, Z14; \
	VPDPWSSD.BCST (260+4*K)(DI)(R9*1), Z22, Z15

// Q5RFLOAT(M, S, MINS, F): F += d·float32(S) − dmin·float32(MINS), d = half(d)·D (Z25
// the rows' d, Z26 their dmin); S and MINS cleared for the next block.
#define Q5RFLOAT(M, S, MINS, F) \
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

#define Q5RD \
	VCVTPH2PS (SI), Z25; \
	VCVTPH2PS 32(SI), Z26

// Q5RMASKS: Z24 bytes 0x0f, Z31 bytes 0x10.
#define Q5RMASKS \
	MOVL         $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z24; \
	MOVL         $0x10101010, AX; \
	VPBROADCASTD AX, Z31

// func dotQ5_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)
//
// Four tokens (a, a+nb, a+2nb, a+3nb blocks) against ngroups groups of sixteen rows; token
// i's result for row r at out[i·ldo + r]. Registers as dotQ4_KR16Q8K4VNNI's, and Z10, Z11
// the chunk's high-bit planes, Z8, Z9 scratch.
TEXT ·dotQ5_KR16Q8K4VNNI(SB), NOSPLIT, $0-48
	MOVQ      packed+0(FP), SI
	MOVQ      ngroups+24(FP), R12
	MOVQ      out+32(FP), R13
	MOVQ      ldo+40(FP), R14
	SHLQ      $2, R14
	LEAQ      (R14)(R14*2), R11
	Q5RMASKS
	MOVQ      $0x9999999999999999, AX
	KMOVQ     AX, K1
	MOVQ      nblocks+16(FP), R8
	IMUL3Q    $Q8K_SIZE, R8, R8
	LEAQ      (R8)(R8*2), R9
	VPXORD    Z4, Z4, Z4
	VPXORD    Z5, Z5, Z5
	VPXORD    Z6, Z6, Z6
	VPXORD    Z7, Z7, Z7
	VPXORD    Z12, Z12, Z12
	VPXORD    Z13, Z13, Z13
	VPXORD    Z14, Z14, Z14
	VPXORD    Z15, Z15, Z15
	VPXORD    Z16, Z16, Z16
	VPXORD    Z17, Z17, Z17
	VPXORD    Z18, Z18, Z18
	VPXORD    Z19, Z19, Z19

q5r4group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

q5r4block:
	Q5RCHUNK4(0)
	Q5RCHUNK4(1)
	Q5RCHUNK4(2)
	Q5RCHUNK4(3)
	Q5RMINS4(0)
	Q5RMINS4(1)
	Q5RMINS4(2)
	Q5RMINS4(3)
	Q5RMINS4(4)
	Q5RMINS4(5)
	Q5RMINS4(6)
	Q5RMINS4(7)
	Q5RD
	Q5RFLOAT((DI), Z4, Z12, Z0)
	Q5RFLOAT((DI)(R8*1), Z5, Z13, Z1)
	Q5RFLOAT((DI)(R8*2), Z6, Z14, Z2)
	Q5RFLOAT((DI)(R9*1), Z7, Z15, Z3)

	ADDQ $Q5R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q5r4block

	VMOVUPS Z0, (R13)
	VMOVUPS Z1, (R13)(R14*1)
	VMOVUPS Z2, (R13)(R14*2)
	VMOVUPS Z3, (R13)(R11*1)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q5r4group
	VZEROUPPER
	RET

// Q5RQUAD1(J, G) and Q5RQUAD1B(J, G): Q5RQUAD4 for one token, into Z12/Z16 and Z13/Z17:
// the quads alternate accumulators to halve the chains of dependent VPDPBUSD.
#define Q5RQUAD1(J, G) \
	Q5RVAL(J, G, Z20, Z21, Z14, Z15); \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z20, Z12; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z21, Z16

#define Q5RQUAD1B(J, G) \
	Q5RVAL(J, G, Z8, Z9, Z18, Z19); \
	VPDPBUSD.BCST (4+64*J+4*G)(DI), Z8, Z13; \
	VPDPBUSD.BCST (36+64*J+4*G)(DI), Z9, Z17

// Q5RCHUNK1(J): chunk J for one token into Z4.
#define Q5RCHUNK1(J) \
	Q5RHI(J); \
	Q5RQUAD1(J, 0); \
	Q5RQUAD1B(J, 1); \
	Q5RQUAD1(J, 2); \
	Q5RQUAD1B(J, 3); \
	Q5RQUAD1(J, 4); \
	Q5RQUAD1B(J, 5); \
	Q5RQUAD1(J, 6); \
	Q5RQUAD1B(J, 7); \
	VPADDD    Z13, Z12, Z12; \
	VPADDD    Z17, Z16, Z16; \
	VPXORD    Z13, Z13, Z13; \
	VPXORD    Z17, Z17, Z17; \
	VPMOVZXBD (64+32*J)(SI), Z22; \
	VPMOVZXBD (80+32*J)(SI), Z23; \
	Q5RSCALE(Z12, Z16, Z4)

// Q5RPF(I): prefetch lines I…I+11 of the group-block 4 KiB ahead (45 lines: 2,880 bytes;
// four of these cover it).
#define Q5RPF(I) \
	PREFETCHT0 (4096+64*I)(SI); \
	PREFETCHT0 (4096+64*I+64)(SI); \
	PREFETCHT0 (4096+64*I+128)(SI); \
	PREFETCHT0 (4096+64*I+192)(SI); \
	PREFETCHT0 (4096+64*I+256)(SI); \
	PREFETCHT0 (4096+64*I+320)(SI); \
	PREFETCHT0 (4096+64*I+384)(SI); \
	PREFETCHT0 (4096+64*I+448)(SI); \
	PREFETCHT0 (4096+64*I+512)(SI); \
	PREFETCHT0 (4096+64*I+576)(SI); \
	PREFETCHT0 (4096+64*I+640)(SI); \
	PREFETCHT0 (4096+64*I+704)(SI)

// func dotQ5_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)
//
// dotQ5_KR16Q8K4VNNI for one token, out[r] for row r, prefetching 4 KiB ahead.
TEXT ·dotQ5_KR16Q8KVNNI(SB), NOSPLIT, $0-40
	MOVQ   packed+0(FP), SI
	MOVQ   ngroups+24(FP), R12
	MOVQ   out+32(FP), R13
	Q5RMASKS
	VPXORD Z4, Z4, Z4
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17

q5r1group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0

q5r1block:
	Q5RPF(0)
	Q5RCHUNK1(0)
	Q5RPF(12)
	Q5RCHUNK1(1)
	Q5RPF(24)
	Q5RCHUNK1(2)
	Q5RPF(36)
	Q5RCHUNK1(3)
	Q5RMINW(0)
	VPDPWSSD.BCST 260(DI), Z22, Z12
	Q5RMINW(1)
	VPDPWSSD.BCST 264(DI), Z22, Z12
	Q5RMINW(2)
	VPDPWSSD.BCST 268(DI), Z22, Z12
	Q5RMINW(3)
	VPDPWSSD.BCST 272(DI), Z22, Z12
	Q5RMINW(4)
	VPDPWSSD.BCST 276(DI), Z22, Z12
	Q5RMINW(5)
	VPDPWSSD.BCST 280(DI), Z22, Z12
	Q5RMINW(6)
	VPDPWSSD.BCST 284(DI), Z22, Z12
	Q5RMINW(7)
	VPDPWSSD.BCST 288(DI), Z22, Z12
	Q5RD
	Q5RFLOAT((DI), Z4, Z12, Z0)

	ADDQ $Q5R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q5r1block

	VMOVUPS Z0, (R13)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q5r1group
	VZEROUPPER
	RET

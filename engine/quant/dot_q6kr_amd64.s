//go:build amd64 && !purego

#include "textflag.h"

// Q6_K × Q8K over the repacked layout (repack.go), as dot_q4kr_amd64.s does for Q4_K:
// sixteen rows to a ZMM register, one row to each 32-bit lane, VPDPBUSD with four
// activation bytes broadcast. A sub-block of 16 values is four quads A–D of four values;
// its 6-bit values are rebuilt from two nibble planes and a plane of the high bits (the
// same 210 bytes a row's block takes in the file), once for four tokens. value − 32
// is taken as Σ q·a − 32·Bsums per sub-block: the sum starts at −32·Bsums (a table of the
// tokens' sixteen, made once per block), then × the sub-block's scale (VPDPWSSD, Q6RTOK). The float
// step is the Go kernel's: sum += (half·D)·float32(sumi).
//
// Group-block (3,360 bytes): d[16] f16 at 0, scales[16][16] int8 at 32, then at 288 + 192s
// for sub-block s: 64 bytes of low nibbles of quads A (bits 0–3) and B (4–7), 64 of C and
// D, 64 of the high bits (A bits 0–1, B 2–3, C 4–5, D 6–7); row r's four bytes at 4r.

#define Q8K_SIZE 324
#define Q6R_BLOCK 3360

// Q6RDECODE(S): sub-block S's quads into Z12 (A), Z13 (B), Z14 (C), Z15 (D); Z19 holds
// bytes 0x0f, Z20 0x30. f = (dst & Z19) | t is VPTERNLOGD $0xec.
#define Q6RDECODE(S) \
	VMOVDQU64  (416+192*S)(SI), Z16; \
	VMOVDQU64  (288+192*S)(SI), Z12; \
	VPSRLW     $4, Z12, Z13; \
	VPSLLW     $4, Z16, Z17; \
	VPANDD     Z20, Z17, Z17; \
	VPTERNLOGD $0xec, Z19, Z17, Z12; \
	VPSLLW     $2, Z16, Z17; \
	VPANDD     Z20, Z17, Z17; \
	VPTERNLOGD $0xec, Z19, Z17, Z13; \
	VMOVDQU64  (352+192*S)(SI), Z14; \
	VPSRLW     $4, Z14, Z15; \
	VPANDD     Z20, Z16, Z17; \
	VPTERNLOGD $0xec, Z19, Z17, Z14; \
	VPSRLW     $2, Z16, Z17; \
	VPANDD     Z20, Z17, Z17; \
	VPTERNLOGD $0xec, Z19, Z17, Z15

// Q6RTOK(M, T, S, ACC, SUM): sub-block S for the token at M (its bias table at T(SP)) into
// SUM; Z18 holds the sub-block's scales as Q6RSCALES makes them. The sum s (|s| ≤
// 16·32·127) is multiplied as in dot_q4kr_amd64.s: the int16 pair (s & 255, s >> 8) by
// one shuffle (Z24), then VPDPWSSD with (sc, 256·sc), instead of VPMULLD and VPADDD.
#define Q6RTOK(M, T, S, ACC, SUM) \
	VPBROADCASTD  (T+4*S)(SP), ACC; \
	VPDPBUSD.BCST (4+16*S)M, Z12, ACC; \
	VPDPBUSD.BCST (8+16*S)M, Z13, ACC; \
	VPDPBUSD.BCST (12+16*S)M, Z14, ACC; \
	VPDPBUSD.BCST (16+16*S)M, Z15, ACC; \
	VPSHUFB       Z24, ACC, ACC; \
	VPDPWSSD      Z18, ACC, SUM

// Q6RSCALES(S): sub-block S's sixteen int8 scales as int16 pairs (sc, 256·sc) in Z18:
// the lane's bytes sc, sign, 0, sc (Z25 holds 0x0000ffff in each lane).
#define Q6RSCALES(S) \
	VPMOVSXBD  (32+16*S)(SI), Z18; \
	VPSLLD     $24, Z18, Z26; \
	VPTERNLOGD $0xea, Z26, Z25, Z18

#define Q6RSUB4(S) \
	Q6RDECODE(S); \
	Q6RSCALES(S); \
	Q6RTOK((DI), 0, S, Z8, Z4); \
	Q6RTOK((DI)(R8*1), 64, S, Z9, Z5); \
	Q6RTOK((DI)(R8*2), 128, S, Z10, Z6); \
	Q6RTOK((DI)(R9*1), 192, S, Z11, Z7)

// Q6RBIAS(M, T): the token at M's −32·Bsums as sixteen int32 at T(SP).
#define Q6RBIAS(M, T) \
	VPMOVSXWD 260 M, Z22; \
	VPSLLD    $5, Z22, Z22; \
	VPSUBD    Z22, Z23, Z22; \
	VMOVDQU64 Z22, T(SP)

// Q6RFLOAT(M, S, F): F += (d·D)·float32(S), S cleared; Z21 the rows' d as floats.
#define Q6RFLOAT(M, S, F) \
	VMULPS.BCST M, Z21, Z22; \
	VCVTDQ2PS   S, S; \
	VMULPS      S, Z22, Z22; \
	VADDPS      Z22, F, F; \
	VPXORD      S, S, S

#define Q6RSETUP \
	MOVL         $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z19; \
	MOVL         $0x30303030, AX; \
	VPBROADCASTD AX, Z20; \
	VPXORD       Z23, Z23, Z23; \
	VBROADCASTI32X4 ·sumPairShuf(SB), Z24; \
	MOVL         $0xffff, AX; \
	VPBROADCASTD AX, Z25

// func dotQ6_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)
//
// As dotQ4_KR16Q8K4VNNI. Frame: the four tokens' bias tables.
TEXT ·dotQ6_KR16Q8K4VNNI(SB), NOSPLIT, $256-48
	MOVQ   packed+0(FP), SI
	MOVQ   ngroups+24(FP), R12
	MOVQ   out+32(FP), R13
	MOVQ   ldo+40(FP), R14
	SHLQ   $2, R14
	LEAQ   (R14)(R14*2), R11
	Q6RSETUP
	MOVQ   nblocks+16(FP), R8
	IMUL3Q $Q8K_SIZE, R8, R8
	LEAQ   (R8)(R8*2), R9
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

q6r4group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

q6r4block:
	Q6RBIAS((DI), 0)
	Q6RBIAS((DI)(R8*1), 64)
	Q6RBIAS((DI)(R8*2), 128)
	Q6RBIAS((DI)(R9*1), 192)
	Q6RSUB4(0)
	Q6RSUB4(1)
	Q6RSUB4(2)
	Q6RSUB4(3)
	Q6RSUB4(4)
	Q6RSUB4(5)
	Q6RSUB4(6)
	Q6RSUB4(7)
	Q6RSUB4(8)
	Q6RSUB4(9)
	Q6RSUB4(10)
	Q6RSUB4(11)
	Q6RSUB4(12)
	Q6RSUB4(13)
	Q6RSUB4(14)
	Q6RSUB4(15)
	VCVTPH2PS (SI), Z21
	Q6RFLOAT((DI), Z4, Z0)
	Q6RFLOAT((DI)(R8*1), Z5, Z1)
	Q6RFLOAT((DI)(R8*2), Z6, Z2)
	Q6RFLOAT((DI)(R9*1), Z7, Z3)

	ADDQ $Q6R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q6r4block

	VMOVUPS Z0, (R13)
	VMOVUPS Z1, (R13)(R14*1)
	VMOVUPS Z2, (R13)(R14*2)
	VMOVUPS Z3, (R13)(R11*1)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q6r4group
	VZEROUPPER
	RET

// Q6RSUB1(S, ACC): sub-block S for one token; the sub-blocks alternate accumulators.
#define Q6RSUB1(S, ACC) \
	PREFETCHT0 (4096+192*S)(SI); \
	PREFETCHT0 (4160+192*S)(SI); \
	PREFETCHT0 (4224+192*S)(SI); \
	Q6RDECODE(S); \
	Q6RSCALES(S); \
	Q6RTOK((DI), 0, S, ACC, Z4)

// func dotQ6_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)
//
// One token; it prefetches 4 KiB ahead, as the one-token Q4_K kernel.
TEXT ·dotQ6_KR16Q8KVNNI(SB), NOSPLIT, $64-40
	MOVQ   packed+0(FP), SI
	MOVQ   ngroups+24(FP), R12
	MOVQ   out+32(FP), R13
	Q6RSETUP
	VPXORD Z4, Z4, Z4

q6r1group:
	MOVQ   a+8(FP), DI
	MOVQ   nblocks+16(FP), CX
	VXORPS Z0, Z0, Z0

q6r1block:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	PREFETCHT0 4224(SI)
	PREFETCHT0 4288(SI)
	PREFETCHT0 4352(SI)
	Q6RBIAS((DI), 0)
	Q6RSUB1(0, Z8)
	Q6RSUB1(1, Z9)
	Q6RSUB1(2, Z8)
	Q6RSUB1(3, Z9)
	Q6RSUB1(4, Z8)
	Q6RSUB1(5, Z9)
	Q6RSUB1(6, Z8)
	Q6RSUB1(7, Z9)
	Q6RSUB1(8, Z8)
	Q6RSUB1(9, Z9)
	Q6RSUB1(10, Z8)
	Q6RSUB1(11, Z9)
	Q6RSUB1(12, Z8)
	Q6RSUB1(13, Z9)
	Q6RSUB1(14, Z8)
	Q6RSUB1(15, Z9)
	VCVTPH2PS (SI), Z21
	Q6RFLOAT((DI), Z4, Z0)

	ADDQ $Q6R_BLOCK, SI
	ADDQ $Q8K_SIZE, DI
	DECQ CX
	JNZ  q6r1block

	VMOVUPS Z0, (R13)
	ADDQ    $64, R13
	DECQ    R12
	JNZ     q6r1group
	VZEROUPPER
	RET

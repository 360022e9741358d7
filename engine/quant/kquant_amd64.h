// Macros shared by the K-quant assembly kernels (dot_amd64.s, dequant_amd64.s, and the
// repacked ones, dot_q4kr_amd64.s and dot_q5kr_amd64.s).

// KSCALES unpacks the Q4_K/Q5_K scale bytes u0,u1,u2 at 4(SI) into eight 6-bit scales and
// eight 6-bit mins (scales 0..3 = u0&0x3f, 4..7 = u2&0x0f | (u0>>6)<<4; mins 0..3 = u1&0x3f,
// 4..7 = u2>>4 | (u1>>6)<<4, bytewise) and stores d·scale at 16(SP) and dmin·min at 48(SP).
// The bytes are assembled in registers: 8-byte loads of 4-byte stores would miss store
// forwarding on every block.
#define KSCALES \
	MOVL         4(SI), AX; \
	MOVL         8(SI), BX; \
	MOVL         12(SI), DX; \
	MOVL         DX, R8; \
	SHRL         $4, R8; \
	ANDL         $0x0f0f0f0f, R8; \
	MOVL         BX, R9; \
	SHRL         $6, R9; \
	ANDL         $0x03030303, R9; \
	SHLL         $4, R9; \
	ORL          R9, R8; \
	ANDL         $0x3f3f3f3f, BX; \
	ANDL         $0x0f0f0f0f, DX; \
	MOVL         AX, R9; \
	SHRL         $6, R9; \
	ANDL         $0x03030303, R9; \
	SHLL         $4, R9; \
	ORL          R9, DX; \
	ANDL         $0x3f3f3f3f, AX; \
	VMOVD        AX, X4; \
	VPINSRD      $1, DX, X4, X4; \
	VMOVD        BX, X5; \
	VPINSRD      $1, R8, X5, X5; \
	VPMOVZXBD    X4, Y4; \
	VPMOVZXBD    X5, Y5; \
	VCVTDQ2PS    Y4, Y4; \
	VCVTDQ2PS    Y5, Y5; \
	VPBROADCASTW (SI), X6; \
	VCVTPH2PS    X6, Y6; \
	VPBROADCASTW 2(SI), X7; \
	VCVTPH2PS    X7, Y7; \
	VMULPS       Y6, Y4, Y4; \
	VMULPS       Y7, Y5, Y5; \
	VMOVUPS      Y4, 16(SP); \
	VMOVUPS      Y5, 48(SP)

// KRSCALEW(LO, HI, S): S += LO·sc_lo + HI·sc_hi for two sub-blocks' int32 sums in LO and
// HI, which are cleared for the next chunk, without VPMULLD, whose two µops on the
// multiply port cost a quarter of the VPDPBUSDs before it. A sum s (|s| < 2^23) becomes the
// int16 pair (s & 255, s >> 8) by one byte shuffle (Z8: sumPairShuf), and VPDPWSSD with
// the pair (sc, 256·sc) (Z22, Z23: VPERMB of the scale bytes by scalePairLo and
// scalePairHi under the mask 0x9…9) adds sc·(s & 255) + 256·sc·(s >> 8) = sc·s: the same
// integer VPMULLD and VPADDD give.
#define KRSCALEW(LO, HI, S) \
	VPSHUFB  Z8, LO, LO; \
	VPSHUFB  Z8, HI, HI; \
	VPDPWSSD Z22, LO, S; \
	VPDPWSSD Z23, HI, S; \
	VPXORD   LO, LO, LO; \
	VPXORD   HI, HI, HI

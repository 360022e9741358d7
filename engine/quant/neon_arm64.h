// Advanced SIMD instructions the Go assembler has no mnemonic for, as WORD encodings.
// Operands are register numbers in Arm order, destination first: FADD4S(1, 2, 3) is
// "fadd v1.4s, v2.4s, v3.4s". Each encoding was checked against llvm-mc, and the kernels
// that use them are tested bit for bit against the Go ones under qemu.

#define FADD4S(d, n, m) WORD $(0x4E20D400 | (m)<<16 | (n)<<5 | (d))
#define FMUL4S(d, n, m) WORD $(0x6E20DC00 | (m)<<16 | (n)<<5 | (d))
#define FMLA4S(d, n, m) WORD $(0x4E20CC00 | (m)<<16 | (n)<<5 | (d))
#define FADDP4S(d, n, m) WORD $(0x6E20D400 | (m)<<16 | (n)<<5 | (d))

// faddp Sd, Vn.2s: lane 0 + lane 1.
#define FADDP2S(d, n) WORD $(0x7E30D800 | (n)<<5 | (d))

// By element: Vd.4s op= Vn.4s · Vm.s[i].
#define FMLAE(d, n, m, i) WORD $(0x4F801000 | ((i)&1)<<21 | (m)<<16 | ((i)>>1)<<11 | (n)<<5 | (d))
#define FMLSE(d, n, m, i) WORD $(0x4F805000 | ((i)&1)<<21 | (m)<<16 | ((i)>>1)<<11 | (n)<<5 | (d))
#define FMULE(d, n, m, i) WORD $(0x4F809000 | ((i)&1)<<21 | (m)<<16 | ((i)>>1)<<11 | (n)<<5 | (d))

#define SCVTF4S(d, n) WORD $(0x4E21D800 | (n)<<5 | (d))
#define UCVTF4S(d, n) WORD $(0x6E21D800 | (n)<<5 | (d))

// Widening: the low (…L) or high (…2) half of Vn, sign- or zero-extended.
#define SXTL8H(d, n) WORD $(0x0F08A400 | (n)<<5 | (d))
#define SXTL28H(d, n) WORD $(0x4F08A400 | (n)<<5 | (d))
#define SXTL4S(d, n) WORD $(0x0F10A400 | (n)<<5 | (d))
#define SXTL24S(d, n) WORD $(0x4F10A400 | (n)<<5 | (d))
#define UXTL8H(d, n) WORD $(0x2F08A400 | (n)<<5 | (d))
#define UXTL28H(d, n) WORD $(0x6F08A400 | (n)<<5 | (d))
#define UXTL4S(d, n) WORD $(0x2F10A400 | (n)<<5 | (d))
#define UXTL24S(d, n) WORD $(0x6F10A400 | (n)<<5 | (d))

// zip1/zip2 Vd.2d, Vn.2d, Vm.2d: the low (high) doublewords of Vn and Vm.
#define ZIP12D(d, n, m) WORD $(0x4EC03800 | (m)<<16 | (n)<<5 | (d))
#define ZIP22D(d, n, m) WORD $(0x4EC07800 | (m)<<16 | (n)<<5 | (d))

// fcvtl Vd.4s, Vn.4h: four halves to singles.
#define FCVTL4S(d, n) WORD $(0x0E217800 | (n)<<5 | (d))

// sdot Vd.4s, Vn.16b, Vm.16b (FEAT_DotProd): lane i += Σ of four int8 products.
#define SDOT4S(d, n, m) WORD $(0x4E809400 | (m)<<16 | (n)<<5 | (d))
// smull/smull2 Vd.8h, Vn.8b/16b, Vm.8b/16b and sadalp Vd.4s, Vn.8h.
#define SMULL8H(d, n, m) WORD $(0x0E20C000 | (m)<<16 | (n)<<5 | (d))
#define SMULL28H(d, n, m) WORD $(0x4E20C000 | (m)<<16 | (n)<<5 | (d))
#define SADALP4S(d, n) WORD $(0x4E606800 | (n)<<5 | (d))
// addv Sd, Vn.4s: the sum of the four int32 lanes.
#define ADDV4S(d, n) WORD $(0x4EB1B800 | (n)<<5 | (d))
// scvtf Sd, Sn: int32 to float32 in a SIMD register.
#define SCVTFS(d, n) WORD $(0x5E21D800 | (n)<<5 | (d))

// ROWSUM folds the row totals A (lanes 0..3) and B (lanes 4..7) as the Go kernels return
// them, ((a0+a1)+(a2+a3)) + ((b0+b1)+(b2+b3)), into lane 0 of T.
#define ROWSUM(T, A, B) \
	FADDP4S(T, A, B); \
	FADDP4S(T, T, T); \
	FADDP2S(T, T)

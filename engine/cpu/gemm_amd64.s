//go:build amd64 && !purego

#include "textflag.h"

// Register-blocked GEMM micro-kernels: C[i][j] = Σ_k A[i][k]·B[k][j] for a tile of MR rows
// of A (read row-major with stride lda, one element broadcast at a time) and NR columns of B
// (read as rows of NR contiguous floats, stride ldb). The whole tile of C lives in registers
// for the k loop, so each FMA costs one broadcast shared by NR/lanes FMAs and B loads shared
// by MR rows, instead of two loads per FMA in a dot product. Each C[i][j] is one FMA chain
// over k in order: exact float32 products, summed in k order.

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// ---- AVX-512: 12 rows × 32 columns, 24 accumulators Z0..Z23 (row i in Z2i, Z2i+1).

#define ROW512(ADDR, A0, A1) \
	VBROADCASTSS ADDR, Z26; \
	VFMADD231PS  Z26, Z24, A0; \
	VFMADD231PS  Z26, Z25, A1

#define STORE512(A0, A1) \
	VMOVUPS A0, (DX); \
	VMOVUPS A1, 64(DX); \
	ADDQ    R14, DX

// func gemm12x32AVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
TEXT ·gemm12x32AVX512(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R13
	SHLQ $2, R13
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R14
	SHLQ $2, R14
	LEAQ (R9)(R9*2), R10  // 3·lda
	LEAQ (SI)(R9*4), R11  // row 4
	LEAQ (R11)(R9*4), R12 // row 8

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	TESTQ  CX, CX
	JZ     store

loop:
	VMOVUPS (DI), Z24
	VMOVUPS 64(DI), Z25
	ROW512((SI), Z0, Z1)
	ROW512((SI)(R9*1), Z2, Z3)
	ROW512((SI)(R9*2), Z4, Z5)
	ROW512((SI)(R10*1), Z6, Z7)
	ROW512((R11), Z8, Z9)
	ROW512((R11)(R9*1), Z10, Z11)
	ROW512((R11)(R9*2), Z12, Z13)
	ROW512((R11)(R10*1), Z14, Z15)
	ROW512((R12), Z16, Z17)
	ROW512((R12)(R9*1), Z18, Z19)
	ROW512((R12)(R9*2), Z20, Z21)
	ROW512((R12)(R10*1), Z22, Z23)
	ADDQ    $4, SI
	ADDQ    $4, R11
	ADDQ    $4, R12
	ADDQ    R13, DI
	DECQ    CX
	JNZ     loop

store:
	STORE512(Z0, Z1)
	STORE512(Z2, Z3)
	STORE512(Z4, Z5)
	STORE512(Z6, Z7)
	STORE512(Z8, Z9)
	STORE512(Z10, Z11)
	STORE512(Z12, Z13)
	STORE512(Z14, Z15)
	STORE512(Z16, Z17)
	STORE512(Z18, Z19)
	STORE512(Z20, Z21)
	STORE512(Z22, Z23)
	VZEROUPPER
	RET

// gemm12x32TAVX512 is gemm12x32AVX512 storing C transposed: C[i][j] goes to c[j·ldc+i] for
// the first m rows and n columns only. A product of weight rows (i) and tokens (j) thereby
// lands in the token-major output directly. The output lines are prefetched before the k loop
// so that the scattered stores at its end do not wait for memory.
//
// Frame: 0(SP) the tile as 12 rows of 32 floats.
// func gemm12x32TAVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)
TEXT ·gemm12x32TAVX512(SB), 0, $1536-72
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R13
	SHLQ $2, R13
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R14
	SHLQ $2, R14
	LEAQ (R9)(R9*2), R10  // 3·lda
	LEAQ (SI)(R9*4), R11  // row 4
	LEAQ (R11)(R9*4), R12 // row 8

	// Prefetch the n output runs of m floats.
	MOVQ m+56(FP), AX
	LEAQ -4(DX)(AX*4), BX
	MOVQ n+64(FP), AX
	MOVQ DX, R8

pf:
	PREFETCHT0 (R8)
	PREFETCHT0 (BX)
	ADDQ       R14, R8
	ADDQ       R14, BX
	DECQ       AX
	JNZ        pf

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	TESTQ  CX, CX
	JZ     store

loop:
	VMOVUPS (DI), Z24
	VMOVUPS 64(DI), Z25
	ROW512((SI), Z0, Z1)
	ROW512((SI)(R9*1), Z2, Z3)
	ROW512((SI)(R9*2), Z4, Z5)
	ROW512((SI)(R10*1), Z6, Z7)
	ROW512((R11), Z8, Z9)
	ROW512((R11)(R9*1), Z10, Z11)
	ROW512((R11)(R9*2), Z12, Z13)
	ROW512((R11)(R10*1), Z14, Z15)
	ROW512((R12), Z16, Z17)
	ROW512((R12)(R9*1), Z18, Z19)
	ROW512((R12)(R9*2), Z20, Z21)
	ROW512((R12)(R10*1), Z22, Z23)
	ADDQ    $4, SI
	ADDQ    $4, R11
	ADDQ    $4, R12
	ADDQ    R13, DI
	DECQ    CX
	JNZ     loop

store:
	VMOVUPS Z0, 0(SP)
	VMOVUPS Z1, 64(SP)
	VMOVUPS Z2, 128(SP)
	VMOVUPS Z3, 192(SP)
	VMOVUPS Z4, 256(SP)
	VMOVUPS Z5, 320(SP)
	VMOVUPS Z6, 384(SP)
	VMOVUPS Z7, 448(SP)
	VMOVUPS Z8, 512(SP)
	VMOVUPS Z9, 576(SP)
	VMOVUPS Z10, 640(SP)
	VMOVUPS Z11, 704(SP)
	VMOVUPS Z12, 768(SP)
	VMOVUPS Z13, 832(SP)
	VMOVUPS Z14, 896(SP)
	VMOVUPS Z15, 960(SP)
	VMOVUPS Z16, 1024(SP)
	VMOVUPS Z17, 1088(SP)
	VMOVUPS Z18, 1152(SP)
	VMOVUPS Z19, 1216(SP)
	VMOVUPS Z20, 1280(SP)
	VMOVUPS Z21, 1344(SP)
	VMOVUPS Z22, 1408(SP)
	VMOVUPS Z23, 1472(SP)

	// Column j of the tile is 12 floats 128 bytes apart: gather, store the first m.
	MOVQ      m+56(FP), CX
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K2
	MOVQ      $·gatherRows(SB), AX
	VMOVDQU32 (AX), Z30
	MOVQ      SP, BX
	MOVQ      n+64(FP), CX

column:
	KMOVW      K2, K1
	VGATHERDPS (BX)(Z30*1), K1, Z29
	VMOVUPS    Z29, K2, (DX)
	ADDQ       $4, BX
	ADDQ       R14, DX
	DECQ       CX
	JNZ        column

	VZEROUPPER
	RET

// gatherRows holds the byte offsets of the 12 tile rows (16 lanes; the last 4 are masked).
DATA ·gatherRows+0(SB)/4, $0
DATA ·gatherRows+4(SB)/4, $128
DATA ·gatherRows+8(SB)/4, $256
DATA ·gatherRows+12(SB)/4, $384
DATA ·gatherRows+16(SB)/4, $512
DATA ·gatherRows+20(SB)/4, $640
DATA ·gatherRows+24(SB)/4, $768
DATA ·gatherRows+28(SB)/4, $896
DATA ·gatherRows+32(SB)/4, $1024
DATA ·gatherRows+36(SB)/4, $1152
DATA ·gatherRows+40(SB)/4, $1280
DATA ·gatherRows+44(SB)/4, $1408
DATA ·gatherRows+48(SB)/4, $0
DATA ·gatherRows+52(SB)/4, $0
DATA ·gatherRows+56(SB)/4, $0
DATA ·gatherRows+60(SB)/4, $0
GLOBL ·gatherRows(SB), RODATA, $64

// gemm12x16TAVX512 is gemm12x32TAVX512 for a panel of 16 columns: for the last, narrow panel
// of a batch, or a whole batch of at most 16 tokens, where the wide kernel would compute on
// zero padding.
//
// Frame: 0(SP) the tile as 12 rows of 16 floats.
// func gemm12x16TAVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)
TEXT ·gemm12x16TAVX512(SB), 0, $768-72
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R13
	SHLQ $2, R13
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R14
	SHLQ $2, R14
	LEAQ (R9)(R9*2), R10  // 3·lda
	LEAQ (SI)(R9*4), R11  // row 4
	LEAQ (R11)(R9*4), R12 // row 8

	MOVQ m+56(FP), AX
	LEAQ -4(DX)(AX*4), BX
	MOVQ n+64(FP), AX
	MOVQ DX, R8

pf:
	PREFETCHT0 (R8)
	PREFETCHT0 (BX)
	ADDQ       R14, R8
	ADDQ       R14, BX
	DECQ       AX
	JNZ        pf

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	TESTQ  CX, CX
	JZ     store

loop:
	VMOVUPS (DI), Z24
	VFMADD231PS.BCST (SI), Z24, Z0
	VFMADD231PS.BCST (SI)(R9*1), Z24, Z1
	VFMADD231PS.BCST (SI)(R9*2), Z24, Z2
	VFMADD231PS.BCST (SI)(R10*1), Z24, Z3
	VFMADD231PS.BCST (R11), Z24, Z4
	VFMADD231PS.BCST (R11)(R9*1), Z24, Z5
	VFMADD231PS.BCST (R11)(R9*2), Z24, Z6
	VFMADD231PS.BCST (R11)(R10*1), Z24, Z7
	VFMADD231PS.BCST (R12), Z24, Z8
	VFMADD231PS.BCST (R12)(R9*1), Z24, Z9
	VFMADD231PS.BCST (R12)(R9*2), Z24, Z10
	VFMADD231PS.BCST (R12)(R10*1), Z24, Z11
	ADDQ    $4, SI
	ADDQ    $4, R11
	ADDQ    $4, R12
	ADDQ    R13, DI
	DECQ    CX
	JNZ     loop

store:
	VMOVUPS Z0, 0(SP)
	VMOVUPS Z1, 64(SP)
	VMOVUPS Z2, 128(SP)
	VMOVUPS Z3, 192(SP)
	VMOVUPS Z4, 256(SP)
	VMOVUPS Z5, 320(SP)
	VMOVUPS Z6, 384(SP)
	VMOVUPS Z7, 448(SP)
	VMOVUPS Z8, 512(SP)
	VMOVUPS Z9, 576(SP)
	VMOVUPS Z10, 640(SP)
	VMOVUPS Z11, 704(SP)

	// Column j of the tile is 12 floats 64 bytes apart: gather, store the first m.
	MOVQ      m+56(FP), CX
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K2
	MOVQ      $·gatherRows16(SB), AX
	VMOVDQU32 (AX), Z30
	MOVQ      SP, BX
	MOVQ      n+64(FP), CX

column:
	KMOVW      K2, K1
	VGATHERDPS (BX)(Z30*1), K1, Z29
	VMOVUPS    Z29, K2, (DX)
	ADDQ       $4, BX
	ADDQ       R14, DX
	DECQ       CX
	JNZ        column

	VZEROUPPER
	RET

DATA ·gatherRows16+0(SB)/4, $0
DATA ·gatherRows16+4(SB)/4, $64
DATA ·gatherRows16+8(SB)/4, $128
DATA ·gatherRows16+12(SB)/4, $192
DATA ·gatherRows16+16(SB)/4, $256
DATA ·gatherRows16+20(SB)/4, $320
DATA ·gatherRows16+24(SB)/4, $384
DATA ·gatherRows16+28(SB)/4, $448
DATA ·gatherRows16+32(SB)/4, $512
DATA ·gatherRows16+36(SB)/4, $576
DATA ·gatherRows16+40(SB)/4, $640
DATA ·gatherRows16+44(SB)/4, $704
DATA ·gatherRows16+48(SB)/4, $0
DATA ·gatherRows16+52(SB)/4, $0
DATA ·gatherRows16+56(SB)/4, $0
DATA ·gatherRows16+60(SB)/4, $0
GLOBL ·gatherRows16(SB), RODATA, $64

// ---- AVX2: 6 rows × 16 columns, 12 accumulators Y0..Y11 (row i in Y2i, Y2i+1).

#define ROW256(ADDR, A0, A1) \
	VBROADCASTSS ADDR, Y14; \
	VFMADD231PS  Y14, Y12, A0; \
	VFMADD231PS  Y14, Y13, A1

#define STORE256(A0, A1) \
	VMOVUPS A0, (DX); \
	VMOVUPS A1, 32(DX); \
	ADDQ    R14, DX

// func gemm6x16AVX2(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
TEXT ·gemm6x16AVX2(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R13
	SHLQ $2, R13
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R14
	SHLQ $2, R14
	LEAQ (R9)(R9*2), R10 // 3·lda
	LEAQ (SI)(R9*4), R11 // row 4

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ  CX, CX
	JZ     store

loop:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	ROW256((SI), Y0, Y1)
	ROW256((SI)(R9*1), Y2, Y3)
	ROW256((SI)(R9*2), Y4, Y5)
	ROW256((SI)(R10*1), Y6, Y7)
	ROW256((R11), Y8, Y9)
	ROW256((R11)(R9*1), Y10, Y11)
	ADDQ    $4, SI
	ADDQ    $4, R11
	ADDQ    R13, DI
	DECQ    CX
	JNZ     loop

store:
	STORE256(Y0, Y1)
	STORE256(Y2, Y3)
	STORE256(Y4, Y5)
	STORE256(Y6, Y7)
	STORE256(Y8, Y9)
	STORE256(Y10, Y11)
	VZEROUPPER
	RET

// gemm6x16TAVX2 is gemm6x16AVX2 storing the first m rows and n columns of C transposed
// (C[i][j] at c[j·ldc+i]), through the frame, with the output lines prefetched first.
//
// Frame: 0(SP) the tile as 6 rows of 16 floats.
// func gemm6x16TAVX2(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)
TEXT ·gemm6x16TAVX2(SB), 0, $384-72
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R13
	SHLQ $2, R13
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R14
	SHLQ $2, R14
	LEAQ (R9)(R9*2), R10 // 3·lda
	LEAQ (SI)(R9*4), R11 // row 4

	MOVQ m+56(FP), AX
	LEAQ -4(DX)(AX*4), BX
	MOVQ n+64(FP), AX
	MOVQ DX, R8

pf:
	PREFETCHT0 (R8)
	PREFETCHT0 (BX)
	ADDQ       R14, R8
	ADDQ       R14, BX
	DECQ       AX
	JNZ        pf

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ  CX, CX
	JZ     store

loop:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	ROW256((SI), Y0, Y1)
	ROW256((SI)(R9*1), Y2, Y3)
	ROW256((SI)(R9*2), Y4, Y5)
	ROW256((SI)(R10*1), Y6, Y7)
	ROW256((R11), Y8, Y9)
	ROW256((R11)(R9*1), Y10, Y11)
	ADDQ    $4, SI
	ADDQ    $4, R11
	ADDQ    R13, DI
	DECQ    CX
	JNZ     loop

store:
	VMOVUPS Y0, 0(SP)
	VMOVUPS Y1, 32(SP)
	VMOVUPS Y2, 64(SP)
	VMOVUPS Y3, 96(SP)
	VMOVUPS Y4, 128(SP)
	VMOVUPS Y5, 160(SP)
	VMOVUPS Y6, 192(SP)
	VMOVUPS Y7, 224(SP)
	VMOVUPS Y8, 256(SP)
	VMOVUPS Y9, 288(SP)
	VMOVUPS Y10, 320(SP)
	VMOVUPS Y11, 352(SP)

	// Column j: m floats 64 bytes apart in the frame, to m consecutive floats of C.
	MOVQ SP, BX
	MOVQ n+64(FP), CX

column:
	MOVQ m+56(FP), AX
	MOVQ BX, R8
	MOVQ DX, R9

elem:
	MOVL (R8), R10
	MOVL R10, (R9)
	ADDQ $64, R8
	ADDQ $4, R9
	DECQ AX
	JNZ  elem

	ADDQ $4, BX
	ADDQ R14, DX
	DECQ CX
	JNZ  column

	VZEROUPPER
	RET

// func pause()
TEXT ·pause(SB), NOSPLIT, $0-0
	PAUSE
	RET

// func transpose16AVX512(src *float32, lds int, dst *float32, ldd int)
//
// dst[c·ldd+r] = src[r·lds+c] for r, c < 16: four rounds of in-register shuffles (pairs of
// floats, of quadruples within 128-bit lanes, then of lanes twice).
TEXT ·transpose16AVX512(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), AX
	SHLQ $2, AX
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), BX
	SHLQ $2, BX
	VMOVUPS (SI), Z0
	ADDQ    AX, SI
	VMOVUPS (SI), Z1
	ADDQ    AX, SI
	VMOVUPS (SI), Z2
	ADDQ    AX, SI
	VMOVUPS (SI), Z3
	ADDQ    AX, SI
	VMOVUPS (SI), Z4
	ADDQ    AX, SI
	VMOVUPS (SI), Z5
	ADDQ    AX, SI
	VMOVUPS (SI), Z6
	ADDQ    AX, SI
	VMOVUPS (SI), Z7
	ADDQ    AX, SI
	VMOVUPS (SI), Z8
	ADDQ    AX, SI
	VMOVUPS (SI), Z9
	ADDQ    AX, SI
	VMOVUPS (SI), Z10
	ADDQ    AX, SI
	VMOVUPS (SI), Z11
	ADDQ    AX, SI
	VMOVUPS (SI), Z12
	ADDQ    AX, SI
	VMOVUPS (SI), Z13
	ADDQ    AX, SI
	VMOVUPS (SI), Z14
	ADDQ    AX, SI
	VMOVUPS (SI), Z15
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31
	VSHUFPS $0x44, Z18, Z16, Z0
	VSHUFPS $0xee, Z18, Z16, Z1
	VSHUFPS $0x44, Z19, Z17, Z2
	VSHUFPS $0xee, Z19, Z17, Z3
	VSHUFPS $0x44, Z22, Z20, Z4
	VSHUFPS $0xee, Z22, Z20, Z5
	VSHUFPS $0x44, Z23, Z21, Z6
	VSHUFPS $0xee, Z23, Z21, Z7
	VSHUFPS $0x44, Z26, Z24, Z8
	VSHUFPS $0xee, Z26, Z24, Z9
	VSHUFPS $0x44, Z27, Z25, Z10
	VSHUFPS $0xee, Z27, Z25, Z11
	VSHUFPS $0x44, Z30, Z28, Z12
	VSHUFPS $0xee, Z30, Z28, Z13
	VSHUFPS $0x44, Z31, Z29, Z14
	VSHUFPS $0xee, Z31, Z29, Z15
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0xdd, Z4, Z0, Z17
	VSHUFF32X4 $0x88, Z12, Z8, Z18
	VSHUFF32X4 $0xdd, Z12, Z8, Z19
	VSHUFF32X4 $0x88, Z5, Z1, Z20
	VSHUFF32X4 $0xdd, Z5, Z1, Z21
	VSHUFF32X4 $0x88, Z13, Z9, Z22
	VSHUFF32X4 $0xdd, Z13, Z9, Z23
	VSHUFF32X4 $0x88, Z6, Z2, Z24
	VSHUFF32X4 $0xdd, Z6, Z2, Z25
	VSHUFF32X4 $0x88, Z14, Z10, Z26
	VSHUFF32X4 $0xdd, Z14, Z10, Z27
	VSHUFF32X4 $0x88, Z7, Z3, Z28
	VSHUFF32X4 $0xdd, Z7, Z3, Z29
	VSHUFF32X4 $0x88, Z15, Z11, Z30
	VSHUFF32X4 $0xdd, Z15, Z11, Z31
	VSHUFF32X4 $0x88, Z18, Z16, Z0
	VSHUFF32X4 $0xdd, Z18, Z16, Z8
	VSHUFF32X4 $0x88, Z19, Z17, Z4
	VSHUFF32X4 $0xdd, Z19, Z17, Z12
	VSHUFF32X4 $0x88, Z22, Z20, Z1
	VSHUFF32X4 $0xdd, Z22, Z20, Z9
	VSHUFF32X4 $0x88, Z23, Z21, Z5
	VSHUFF32X4 $0xdd, Z23, Z21, Z13
	VSHUFF32X4 $0x88, Z26, Z24, Z2
	VSHUFF32X4 $0xdd, Z26, Z24, Z10
	VSHUFF32X4 $0x88, Z27, Z25, Z6
	VSHUFF32X4 $0xdd, Z27, Z25, Z14
	VSHUFF32X4 $0x88, Z30, Z28, Z3
	VSHUFF32X4 $0xdd, Z30, Z28, Z11
	VSHUFF32X4 $0x88, Z31, Z29, Z7
	VSHUFF32X4 $0xdd, Z31, Z29, Z15
	VMOVUPS Z0, (DI)
	ADDQ    BX, DI
	VMOVUPS Z1, (DI)
	ADDQ    BX, DI
	VMOVUPS Z2, (DI)
	ADDQ    BX, DI
	VMOVUPS Z3, (DI)
	ADDQ    BX, DI
	VMOVUPS Z4, (DI)
	ADDQ    BX, DI
	VMOVUPS Z5, (DI)
	ADDQ    BX, DI
	VMOVUPS Z6, (DI)
	ADDQ    BX, DI
	VMOVUPS Z7, (DI)
	ADDQ    BX, DI
	VMOVUPS Z8, (DI)
	ADDQ    BX, DI
	VMOVUPS Z9, (DI)
	ADDQ    BX, DI
	VMOVUPS Z10, (DI)
	ADDQ    BX, DI
	VMOVUPS Z11, (DI)
	ADDQ    BX, DI
	VMOVUPS Z12, (DI)
	ADDQ    BX, DI
	VMOVUPS Z13, (DI)
	ADDQ    BX, DI
	VMOVUPS Z14, (DI)
	ADDQ    BX, DI
	VMOVUPS Z15, (DI)
	VZEROUPPER
	RET

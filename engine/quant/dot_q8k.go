package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// The 8-bit activation path: activations quantized per 256-element block to int8 with one
// float scale (ggml's Q8_K), and dot products of quantized rows with them in integers. It is
// what llama.cpp's CPU backend does for the K-quants and i-quants; it reads a quarter of the
// activation bytes of the float path and turns the inner loop into 8-bit multiply-adds. The
// result differs from DotF32 by the activations' rounding (≈0.4% of a block's largest
// magnitude per value), so it is an option beside the exact path, not its replacement.

// Q8K is one 256-element block of quantized activations: x ≈ D·Qs, and Bsums[g] is the sum
// of Qs over the g-th group of 16 (the K-quants' mins and offsets need only those sums).
// Sums[j] is D times the sum over the j-th group of 32, as a float: the Q4_K kernels take
// a block's mins term as one product of eight lanes with it. Its layout (324 bytes,
// 4-aligned, no pointers) is read by the assembly kernels.
type Q8K struct {
	D     float32
	Qs    [QK_K]int8
	Bsums [QK_K / 16]int16
	Sums  [QK_K / 32]float32
}

// Q8KFloats is the size of a Q8K in float32s, for callers that hold blocks in float32
// scratch memory (see Q8KView).
const Q8KFloats = int(unsafe.Sizeof(Q8K{})) / 4

// Q8KView reinterprets scratch float32 memory as n blocks; len(buf) must be ≥ n·Q8KFloats.
func Q8KView(buf []float32, n int) []Q8K {
	if len(buf) < n*Q8KFloats {
		panic(fmt.Sprintf("quant: Q8KView of %d blocks over %d floats", n, len(buf)))
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*Q8K)(unsafe.Pointer(&buf[0])), n)
}

// QuantizeQ8K quantizes x (a multiple of 256 values) into len(x)/256 blocks as ggml's
// reference does: the value of largest magnitude maps to −127, the others round to nearest
// (ties to even, as ggml's nearest_int) in [−127, 127].
func QuantizeQ8K(x []float32, dst []Q8K) {
	if len(x) != len(dst)*QK_K {
		panic(fmt.Sprintf("quant: QuantizeQ8K of %d values into %d blocks", len(x), len(dst)))
	}
	for i := range dst {
		quantizeQ8KBlock(x[i*QK_K:(i+1)*QK_K], &dst[i])
	}
}

func quantizeQ8KBlock(x []float32, b *Q8K) { quantizeQ8KWith(x, b, absMax256, quantizeQs) }

// quantizeQ8KWith is quantizeQ8KBlock with the given forms of its two loops (the tests run
// the pure-Go ones beside the machine's).
func quantizeQ8KWith(x []float32, b *Q8K, absMax func([]float32) float32, quantize func([]float32, float32, *Q8K)) {
	x = x[:QK_K]
	amax := absMax(x)
	if amax == 0 {
		*b = Q8K{}
		return
	}
	// The first value of the largest magnitude sets the sign of the scale.
	var vmax float32
	for _, v := range x {
		if abs32(v) == amax {
			vmax = v
			break
		}
	}
	iscale := -127 / vmax
	quantize(x, iscale, b)
	b.D = 1 / iscale
	for j := range b.Sums {
		b.Sums[j] = b.D * float32(int32(b.Bsums[2*j])+int32(b.Bsums[2*j+1]))
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func absMax256Go(x []float32) float32 {
	var amax float32
	for _, v := range x[:QK_K] {
		if a := abs32(v); a > amax { // not max(): a NaN would win it
			amax = a
		}
	}
	return amax
}

func quantizeQsGo(x []float32, iscale float32, b *Q8K) {
	for j, v := range x[:QK_K] {
		b.Qs[j] = int8(min(127, nearestInt(iscale*v)))
	}
	for g := range b.Bsums {
		var s int16
		for _, q := range b.Qs[16*g : 16*g+16] {
			s += int16(q)
		}
		b.Bsums[g] = s
	}
}

// nearestInt rounds to nearest, ties to even, for |v| ≤ 2²²: adding 1.5·2²³ leaves the
// integer in the low mantissa bits (ggml's nearest_int).
func nearestInt(v float32) int {
	f := v + 12582912
	return int(math.Float32bits(f)&0x007fffff) - 0x00400000
}

// Int8Dot reports whether t has an 8-bit activation dot product (DotQ8K).
func Int8Dot(t Type) bool {
	return int(t) < len(q8kDots) && q8kDots[t] != nil
}

// q8kDots are the pure-Go kernels, one row each; the assembly ones replace some of them
// (dotRowsQ8KFast).
var q8kDots = [...]func(row []byte, a []Q8K) float32{
	Q2_K:    dotQ2_KQ8KGo,
	Q3_K:    dotQ3_KQ8KGo,
	Q4_K:    dotQ4_KQ8KGo,
	Q5_K:    dotQ5_KQ8KGo,
	Q6_K:    dotQ6_KQ8KGo,
	IQ2_XXS: dotIQ2_XXSQ8KGo,
	IQ2_XS:  dotIQ2_XSQ8KGo,
	IQ3_XXS: dotIQ3_XXSQ8KGo,
	IQ1_M:   dotIQ1_MQ8KGo,
	IQ4_XS:  dotIQ4_XSQ8KGo,
}

// DotRowsQ8K sets out[r] to the dot product of row r of rows (type t, len(a)·256 elements
// each, stored one after another) with the quantized activations a. t must have Int8Dot.
func DotRowsQ8K(t Type, rows []byte, a []Q8K, out []float32) {
	if !Int8Dot(t) {
		panic(fmt.Sprintf("quant: DotRowsQ8K on %v, which has no 8-bit kernel", t))
	}
	rb := t.RowBytes(len(a) * QK_K)
	if len(rows) != len(out)*rb {
		panic(fmt.Sprintf("quant: DotRowsQ8K %v: %d bytes for %d rows of %d blocks", t, len(rows), len(out), len(a)))
	}
	if len(out) == 0 || len(a) == 0 {
		clear(out)
		return
	}
	if dotRowsQ8KFast(t, rows, a, out) {
		return
	}
	dot := q8kDots[t]
	for r := range out {
		out[r] = dot(rows[r*rb:(r+1)*rb], a)
	}
}

// Int8Rows4 reports whether t has a four-token 8-bit kernel on this machine (DotRows4Q8K).
func Int8Rows4(t Type) bool { return Int8Dot(t) && int8Rows4(t) }

// DotRows4Q8K is DotRowsQ8K for four tokens at once, each row's blocks decoded once for
// the four: a holds the tokens one after another (len(a)/4 blocks each), and token i's
// results go to out[i·ldo : i·ldo+rows]. Each token's numbers are exactly what DotRowsQ8K
// gives it alone. t must have Int8Rows4.
func DotRows4Q8K(t Type, rows []byte, a []Q8K, out []float32, ldo int) {
	if !Int8Rows4(t) {
		panic(fmt.Sprintf("quant: DotRows4Q8K on %v, which has no four-token 8-bit kernel", t))
	}
	nb := len(a) / 4
	rb := t.RowBytes(nb * QK_K)
	if len(a)%4 != 0 || nb == 0 || len(rows)%rb != 0 {
		panic(fmt.Sprintf("quant: DotRows4Q8K %v: %d bytes, %d blocks", t, len(rows), len(a)))
	}
	nr := len(rows) / rb
	if nr == 0 {
		return
	}
	if ldo < nr || len(out) < 3*ldo+nr {
		panic(fmt.Sprintf("quant: DotRows4Q8K %v: %d rows into %d floats every %d", t, nr, len(out), ldo))
	}
	dotRows4Q8K(t, rows, a, nr, out, ldo)
}

// Int8Repacked reports whether t has kernels over a repacked layout on this machine
// (Repack; DotRepackedQ8K, or DotRepackedQ8_0 for Q8_0): then every product of t's
// repacked matrices, of one token or many, should take them.
func Int8Repacked(t Type) bool { return (t == Q8_0 || Int8Dot(t)) && int8Repacked(t) }

// KernelSet names the vector kernels this machine runs: on amd64 "avx512vnni", "avx512",
// "avx2" or "go"; on arm64 "neon+sdot", "neon" or "go".
func KernelSet() string { return kernelSet() }

// Int8Kernel names the 8-bit kernels of t on this machine ("" if t has none): for the
// output of `redlite info` and `redlite bench`.
func Int8Kernel(t Type) string {
	if t == Q8_0 {
		return int8Q8_0Kernel()
	}
	if !Int8Dot(t) {
		return ""
	}
	return int8Kernel(t)
}

// Int8Faster reports whether the 8-bit path is the faster one for t on this machine, as
// measured with BenchmarkDotQ8K (engine/README.md's table; int8Faster per architecture).
func Int8Faster(t Type) bool { return Int8Dot(t) && int8Faster(t) }

// Int8Vector reports whether t's 8-bit kernel is a SIMD one on this machine. The pure-Go
// kernels win only against the pure-Go exact path, one token at a time: for a few tokens
// the GEMM on expanded weights beats them.
func Int8Vector(t Type) bool { return Int8Dot(t) && int8Asm(t) }

// int8GoFaster lists the types whose pure-Go 8-bit kernel beat the exact path where that
// is pure Go too (block expansion and a float dot) in every run of BenchmarkDotQ8K: Q2_K
// 1.9–2.7×, IQ1_M 1.9–2.3×. Q3_K, IQ2_XS, IQ3_XXS and IQ4_XS went either way from run to
// run on the loaded machine and stay exact.
func int8GoFaster(t Type) bool { return t == Q2_K || t == IQ1_M }

// ---- pure-Go kernels: Σ over a block of (row value)·(activation) as integers, scaled once
// per block (and per sub-block for the scales the format stores as integers).

func dotQ4_KQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[144*i:144*i+144], &a[i]
		d := half(b) * q8.D
		dmin := half(b[2:]) * q8.D
		scales, qs := b[4:16], b[16:144]
		var sumi, mins int32
		for j := 0; j < 4; j++ {
			q := qs[32*j : 32*j+32]
			lo, hi := q8.Qs[64*j:64*j+32], q8.Qs[64*j+32:64*j+64]
			var sl, sh int32
			for l, v := range q {
				sl += int32(v&0xf) * int32(lo[l])
				sh += int32(v>>4) * int32(hi[l])
			}
			sc, m := scaleMinK4(2*j, scales)
			sumi += int32(sc) * sl
			mins += int32(m) * int32(q8.Bsums[4*j]+q8.Bsums[4*j+1])
			sc, m = scaleMinK4(2*j+1, scales)
			sumi += int32(sc) * sh
			mins += int32(m) * int32(q8.Bsums[4*j+2]+q8.Bsums[4*j+3])
		}
		// The conversions round each product, as the vector kernels do: without them the
		// compiler may fuse a product into the subtraction (GOAMD64=v3, arm64).
		sum += float32(d*float32(sumi)) - float32(dmin*float32(mins))
	}
	return sum
}

func dotQ5_KQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[176*i:176*i+176], &a[i]
		d := half(b) * q8.D
		dmin := half(b[2:]) * q8.D
		scales, qh, qs := b[4:16], b[16:48], b[48:176]
		var sumi, mins int32
		u1, u2 := byte(1), byte(2)
		for j := 0; j < 4; j++ {
			q := qs[32*j : 32*j+32]
			lo, hi := q8.Qs[64*j:64*j+32], q8.Qs[64*j+32:64*j+64]
			var sl, sh int32
			for l, v := range q {
				ql, qq := int32(v&0xf), int32(v>>4)
				if qh[l]&u1 != 0 {
					ql += 16
				}
				if qh[l]&u2 != 0 {
					qq += 16
				}
				sl += ql * int32(lo[l])
				sh += qq * int32(hi[l])
			}
			sc, m := scaleMinK4(2*j, scales)
			sumi += int32(sc) * sl
			mins += int32(m) * int32(q8.Bsums[4*j]+q8.Bsums[4*j+1])
			sc, m = scaleMinK4(2*j+1, scales)
			sumi += int32(sc) * sh
			mins += int32(m) * int32(q8.Bsums[4*j+2]+q8.Bsums[4*j+3])
			u1 <<= 2
			u2 <<= 2
		}
		sum += float32(d*float32(sumi)) - float32(dmin*float32(mins)) // rounded: see dotQ4_KQ8KGo
	}
	return sum
}

func dotQ6_KQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[210*i:210*i+210], &a[i]
		d := half(b[208:]) * q8.D
		var sumi int32
		for n := 0; n < 2; n++ {
			ql, qh, sc := b[64*n:64*n+64], b[128+32*n:160+32*n], b[192+8*n:200+8*n]
			x := q8.Qs[128*n : 128*n+128]
			var acc [8]int32 // one per 16-element scale group
			for l := 0; l < 32; l++ {
				is := l / 16
				h := qh[l]
				acc[is] += (int32(ql[l]&0xf|(h&3)<<4) - 32) * int32(x[l])
				acc[is+2] += (int32(ql[l+32]&0xf|(h>>2&3)<<4) - 32) * int32(x[l+32])
				acc[is+4] += (int32(ql[l]>>4|(h>>4&3)<<4) - 32) * int32(x[l+64])
				acc[is+6] += (int32(ql[l+32]>>4|(h>>6&3)<<4) - 32) * int32(x[l+96])
			}
			for k, s := range acc {
				sumi += int32(int8(sc[k])) * s
			}
		}
		sum += float32(d * float32(sumi)) // rounded: see dotQ4_KQ8KGo
	}
	return sum
}

func dotQ2_KQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[84*i:84*i+84], &a[i]
		scales, qs := b[0:16], b[16:80]
		d, dmin := half(b[80:])*q8.D, half(b[82:])*q8.D
		var sumi, mins int32
		is := 0
		x := q8.Qs[:]
		for n := 0; n < 2; n++ {
			q := qs[32*n : 32*n+32]
			for shift := 0; shift < 8; shift += 2 {
				for h := 0; h < 2; h++ {
					sc := scales[is]
					var s int32
					for l := 0; l < 16; l++ {
						s += int32((q[l+16*h]>>shift)&3) * int32(x[l])
					}
					sumi += int32(sc&0xf) * s
					mins += int32(sc>>4) * int32(q8.Bsums[is])
					is++
					x = x[16:]
				}
			}
		}
		sum += d*float32(sumi) - dmin*float32(mins)
	}
	return sum
}

func dotQ3_KQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[110*i:110*i+110], &a[i]
		hm, qs := b[0:32], b[32:96]
		sc := q3kScales(b[96:108])
		d := half(b[108:]) * q8.D
		var sumi int32
		is := 0
		m := byte(1)
		x := q8.Qs[:]
		for n := 0; n < 2; n++ {
			q := qs[32*n : 32*n+32]
			for shift := 0; shift < 8; shift += 2 {
				for h := 0; h < 2; h++ {
					var s int32
					for l := 0; l < 16; l++ {
						v := int32((q[l+16*h] >> shift) & 3)
						if hm[l+16*h]&m == 0 {
							v -= 4
						}
						s += v * int32(x[l])
					}
					sumi += int32(sc[is]) * s
					is++
					x = x[16:]
				}
				m <<= 1
			}
		}
		sum += d * float32(sumi)
	}
	return sum
}

// The i-quants' sub-block scales are (2s+1)/8 (IQ2) or (2s+1)/4 (IQ3) of the block scale:
// the odd integer 2s+1 multiplies the integer sum, the power of two the float.

func dotIQ2_XXSQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[66*i:66*i+66], &a[i]
		d := half(b) * q8.D
		qs := b[2:66]
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			aux := binary.LittleEndian.Uint32(qs[8*ib+4:])
			var s int32
			for l := 0; l < 4; l++ {
				s += gridDot(iq2xxsGrid[qs[8*ib+l]], iqSigns[(aux>>(7*l))&127], q8.Qs[32*ib+8*l:])
			}
			sumi += int32(2*(aux>>28)+1) * s
		}
		sum += d * 0.125 * float32(sumi)
	}
	return sum
}

// gridDot is Σ_j ±grid_j·x_j over the 8 unsigned grid bytes of g, sign bit j of s negating.
func gridDot(g uint64, s byte, x []int8) int32 {
	x = x[:8]
	var t int32
	for j := range 8 {
		v := int32(byte(g>>(8*j))) * int32(x[j])
		if s>>j&1 != 0 {
			v = -v
		}
		t += v
	}
	return t
}

func dotIQ2_XSQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[74*i:74*i+74], &a[i]
		d := half(b) * q8.D
		qs, scales := b[2:66], b[66:74]
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			var s [2]int32
			for l := 0; l < 4; l++ {
				q := binary.LittleEndian.Uint16(qs[2*(4*ib+l):])
				s[l/2] += gridDot(iq2xsGrid[q&511], iqSigns[q>>9], q8.Qs[32*ib+8*l:])
			}
			sumi += int32(2*(scales[ib]&0xf)+1)*s[0] + int32(2*(scales[ib]>>4)+1)*s[1]
		}
		sum += d * 0.125 * float32(sumi)
	}
	return sum
}

func dotIQ3_XXSQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[98*i:98*i+98], &a[i]
		d := half(b) * q8.D
		qs, ss := b[2:66], b[66:98]
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			aux := binary.LittleEndian.Uint32(ss[4*ib:])
			q := qs[8*ib:]
			var s int32
			for l := 0; l < 4; l++ {
				g := uint64(iq3xxsGrid[q[2*l]]) | uint64(iq3xxsGrid[q[2*l+1]])<<32
				s += gridDot(g, iqSigns[(aux>>(7*l))&127], q8.Qs[32*ib+8*l:])
			}
			sumi += int32(2*(aux>>28)+1) * s
		}
		sum += d * 0.25 * float32(sumi)
	}
	return sum
}

// dotIQ1_MQ8KGo: a value is dl·(g ± 1/8) with g in {−1, 0, 1}, so 8·value/dl = 8g ± 1 is
// an integer; the float side takes the 1/8.
func dotIQ1_MQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[56*i:56*i+56], &a[i]
		qs, qh := b[0:32], b[32:48]
		var sc [4]int
		for k := range sc {
			sc[k] = int(binary.LittleEndian.Uint16(b[48+2*k:]))
		}
		d := F16ToF32(uint16(sc[0]>>12|(sc[1]>>8)&0x00f0|(sc[2]>>4)&0x0f00|sc[3]&0xf000)) * q8.D
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			s := sc[ib/2] >> (6 * (ib % 2))
			ls := [2]int32{int32(2*(s&7) + 1), int32(2*((s>>3)&7) + 1)}
			idx, neg := iq1mGroups(qs, qh, ib)
			for l := 0; l < 4; l++ {
				g := iq1sGrid[idx[l]]
				delta := int32(1)
				if neg[l] {
					delta = -1
				}
				x := q8.Qs[32*ib+8*l : 32*ib+8*l+8]
				var s int32
				for j, v := range x {
					s += (8*int32(int8(byte(g>>(8*j)))) + delta) * int32(v)
				}
				sumi += ls[l/2] * s
			}
		}
		sum += d * 0.125 * float32(sumi)
	}
	return sum
}

func dotIQ4_XSQ8KGo(row []byte, a []Q8K) float32 {
	var sum float32
	for i := range a {
		b, q8 := row[136*i:136*i+136], &a[i]
		d := half(b) * q8.D
		sh := int(binary.LittleEndian.Uint16(b[2:]))
		sl, qs := b[4:8], b[8:136]
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			ls := int32(int(sl[ib/2]>>(4*(ib%2)))&0xf|((sh>>(2*ib))&3)<<4) - 32
			x := q8.Qs[32*ib : 32*ib+32]
			var s int32
			for j, q := range qs[16*ib : 16*ib+16] {
				s += int32(kvaluesIQ4NL[q&0xf])*int32(x[j]) + int32(kvaluesIQ4NL[q>>4])*int32(x[j+16])
			}
			sumi += ls * s
		}
		sum += d * float32(sumi)
	}
	return sum
}

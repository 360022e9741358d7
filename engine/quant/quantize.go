package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// CanQuantize reports whether Quantize encodes type t.
func CanQuantize(t Type) bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_K, Q6_K:
		return true
	}
	return false
}

// Quantize encodes src into dst in type t, for the types `redlite synth` writes: F32, F16,
// BF16, Q8_0, Q4_K and Q6_K. len(src) must be a multiple of the block size and dst exactly
// t.RowBytes(len(src)) bytes. The K-quant encoders search per sub-block for the scale (and
// min) that minimise a weighted squared error, in the spirit of ggml's reference
// quantizers; their output is any valid block, not necessarily the bytes ggml would write.
func Quantize(t Type, src []float32, dst []byte) error {
	if !CanQuantize(t) {
		return fmt.Errorf("quant: cannot quantize to %v", t)
	}
	bs := t.BlockSize()
	if len(src)%bs != 0 {
		return fmt.Errorf("quant: %v: element count %d is not a multiple of the block size %d", t, len(src), bs)
	}
	if want := t.RowBytes(len(src)); len(dst) != want {
		return fmt.Errorf("quant: %v: %d elements need %d bytes, got %d", t, len(src), want, len(dst))
	}
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	default:
		ts := t.TypeSize()
		enc := encQ8_0
		switch t {
		case Q4_K:
			enc = encQ4_K
		case Q6_K:
			enc = encQ6_K
		}
		for i, o := 0, 0; i < len(src); i, o = i+bs, o+ts {
			enc(src[i:i+bs], dst[o:o+ts])
		}
	}
	return nil
}

// roundInt rounds half away from zero, like C's roundf. The encoders call it for every
// candidate of every element (math.Round was a fifth of `redlite synth`'s time): a float32
// widened to float64 has at most 24 significant bits, so below 2^29 adding 0.5 is exact and
// truncating the sum is math.Round's result; larger values, infinities and NaN take
// math.Round itself.
func roundInt(v float32) int {
	f := float64(v)
	switch {
	case f >= 0 && f < 1<<29:
		return int(f + 0.5)
	case f < 0 && f > -1<<29:
		return -int(0.5 - f)
	}
	return int(math.Round(f))
}

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// putHalfUp stores f as the nearest half of at least its magnitude. A block scale that
// rounded down would push the largest values past the end of the integer range (and a
// subnormal half scale can round down by a lot); rounding up only coarsens the grid.
func putHalfUp(b []byte, f float32) {
	h := F32ToF16(f)
	if math.Abs(float64(F16ToF32(h))) < math.Abs(float64(f)) && h&0x7fff < 0x7bff {
		h++ // halves are sign-magnitude: the next code is the next larger magnitude
	}
	binary.LittleEndian.PutUint16(b, h)
}

// encQ8_0: one symmetric scale for 32 values, so that the largest magnitude maps to ±127.
func encQ8_0(x []float32, b []byte) {
	var amax float32
	for _, v := range x {
		if a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31)); a > amax {
			amax = a
		}
	}
	putHalfUp(b, amax/127)
	d := half(b) // quantize against the stored (rounded) scale
	var id float32
	if d != 0 {
		id = 1 / d
	}
	q := b[2:34]
	for j, v := range x[:32] {
		// |v·id| ≤ 127 since d was rounded up, so no clamp is needed.
		q[j] = byte(int8(math.Round(float64(v * id))))
	}
}

// fitAffine finds scale ≥ 0 and offset ≤ 0 such that x ≈ scale·q + offset with integer q
// in [0, nmax], minimising Σ w·(scale·q + offset − x)². It tries a range of grid spacings
// around (max−min)/nmax, and for each the best scale and offset in closed form given q.
func fitAffine(x, w []float32, nmax int, q []uint8) (scale, offset float32) {
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(q)
		return 0, lo
	}
	var sw, swx float32
	for i, v := range x {
		sw += w[i]
		swx += w[i] * v
	}
	// errOf is the weighted error of a candidate, or a value ≥ bound once the partial sum
	// reaches it: the terms are ≥ 0, so a candidate whose partial sum is already no better
	// than the best cannot win, and stopping early does not change which one does.
	errOf := func(s, o float32, qq []uint8, bound float32) float32 {
		var e float32
		for i, v := range x {
			d := s*float32(qq[i]) + o - v
			e += w[i] * d * d
			if e >= bound {
				return e
			}
		}
		return e
	}
	var cand [32]uint8
	cq := cand[:len(x)]
	scale, offset = (hi-lo)/float32(nmax), lo
	for i, v := range x {
		q[i] = uint8(clampInt(roundInt((v-lo)/scale), 0, nmax))
	}
	best := errOf(scale, offset, q, float32(math.Inf(1)))
	for step := -10; step <= 10; step++ {
		is := (float32(nmax) + 0.1*float32(step)) / (hi - lo)
		var sl, sl2, sxl float32
		for i, v := range x {
			l := uint8(clampInt(roundInt(is*(v-lo)), 0, nmax))
			cq[i] = l
			sl += w[i] * float32(l)
			sl2 += w[i] * float32(l) * float32(l)
			sxl += w[i] * float32(l) * v
		}
		det := sw*sl2 - sl*sl
		if det <= 0 {
			continue
		}
		s := (sw*sxl - swx*sl) / det
		o := (sl2*swx - sl*sxl) / det
		if o > 0 { // the format subtracts a non-negative min: refit through zero
			o, s = 0, sxl/sl2
		}
		if e := errOf(s, o, cq, best); e < best {
			best, scale, offset = e, s, o
			copy(q, cq)
		}
	}
	return scale, offset
}

// encQ4_K: eight sub-blocks of 32, each x ≈ d·sc·q − dmin·m with 6-bit sc and m.
func encQ4_K(x []float32, b []byte) {
	var scales, mins [8]float32
	var q [QK_K]uint8
	var w [32]float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		// Weigh large values more: they dominate a matrix product's error.
		var s2 float32
		for _, v := range xs {
			s2 += v * v
		}
		rms := float32(math.Sqrt(float64(s2 / 32)))
		for l, v := range xs {
			w[l] = rms + float32(math.Abs(float64(v)))
		}
		s, o := fitAffine(xs, w[:], 15, q[32*j:32*j+32])
		scales[j], mins[j] = s, -o
	}
	var maxScale, maxMin float32
	for j := range scales {
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	putHalfUp(b[0:], maxScale/63)
	putHalfUp(b[2:], maxMin/63)
	d, dmin := half(b[0:]), half(b[2:])
	var sc, mn [8]int
	for j := range sc {
		if d > 0 {
			sc[j] = clampInt(roundInt(scales[j]/d), 0, 63)
		}
		if dmin > 0 {
			mn[j] = clampInt(roundInt(mins[j]/dmin), 0, 63)
		}
	}
	s := b[4:16]
	clear(s)
	for j := 0; j < 8; j++ {
		if j < 4 {
			s[j] = byte(sc[j])
			s[j+4] = byte(mn[j])
		} else {
			s[j+4] = byte(sc[j]&0xf | (mn[j]&0xf)<<4)
			s[j-4] |= byte(sc[j]>>4) << 6
			s[j] |= byte(mn[j]>>4) << 6
		}
	}
	// Requantize against the scales as stored, so rounding of d, sc and m is accounted for.
	for j := 0; j < 8; j++ {
		dj, mj := d*float32(sc[j]), dmin*float32(mn[j])
		for l := 0; l < 32; l++ {
			v := 0
			if dj != 0 {
				v = clampInt(roundInt((x[32*j+l]+mj)/dj), 0, 15)
			}
			q[32*j+l] = uint8(v)
		}
	}
	qs := b[16:144]
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			qs[32*c+l] = q[64*c+l] | q[64*c+32+l]<<4
		}
	}
}

// fitSymmetric picks a scale for x ≈ scale·q with q in [−nmax, nmax−1], minimising
// Σ w·(scale·q − x)² over grid spacings near the one that maps the largest magnitude to
// −nmax (the side with one more level).
func fitSymmetric(x, w []float32, nmax int) float32 {
	var big float32
	for _, v := range x {
		if math.Abs(float64(v)) > math.Abs(float64(big)) {
			big = v
		}
	}
	if big == 0 {
		return 0
	}
	var scale, bestNum, bestDen float32
	for step := -9; step <= 9; step++ {
		is := -(float32(nmax) + 0.1*float32(step)) / big
		var sxl, sl2 float32
		for i, v := range x {
			l := float32(clampInt(roundInt(is*v), -nmax, nmax-1))
			sxl += w[i] * v * l
			sl2 += w[i] * l * l
		}
		// With q fixed the best scale is sxl/sl2 and the error falls by sxl²/sl2.
		if sl2 > 0 && (bestDen == 0 || sxl*sxl*bestDen > bestNum*sl2) {
			scale, bestNum, bestDen = sxl/sl2, sxl*sxl, sl2
		}
	}
	return scale
}

// encQ6_K: sixteen groups of 16, x ≈ d·sc·(q−32) with int8 sc and 6-bit q.
func encQ6_K(x []float32, b []byte) {
	var scales [16]float32
	var w [16]float32
	var maxAbs, maxScale float32
	for g := 0; g < 16; g++ {
		xs := x[16*g : 16*g+16]
		for l, v := range xs {
			w[l] = v * v
		}
		scales[g] = fitSymmetric(xs, w[:], 32)
		if a := float32(math.Abs(float64(scales[g]))); a > maxAbs {
			maxAbs, maxScale = a, scales[g]
		}
	}
	clear(b)
	if maxAbs == 0 {
		return
	}
	// The largest group scale maps to −128, the int8 end with one more level.
	putHalfUp(b[208:], -maxScale/128)
	d := half(b[208:])
	var sc [16]int
	var q [QK_K]int
	for g := range sc {
		if d != 0 {
			sc[g] = clampInt(roundInt(scales[g]/d), -128, 127)
		}
		b[192+g] = byte(int8(sc[g]))
		dg := d * float32(sc[g])
		for l := 0; l < 16; l++ {
			v := 0
			if dg != 0 {
				v = clampInt(roundInt(x[16*g+l]/dg), -32, 31)
			}
			q[16*g+l] = v + 32
		}
	}
	for n := 0; n < 2; n++ {
		ql, qh, qq := b[64*n:64*n+64], b[128+32*n:160+32*n], q[128*n:128*n+128]
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := qq[l], qq[l+32], qq[l+64], qq[l+96]
			ql[l] = byte(q1&0xf | (q3&0xf)<<4)
			ql[l+32] = byte(q2&0xf | (q4&0xf)<<4)
			qh[l] = byte(q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6)
		}
	}
}

// QuantizeQ8_0Ref encodes x (a multiple of 32 values) into dst as ggml's own Q8_0 encoder
// does — what llama-quantize writes and what llama.cpp stores in a q8_0 KV cache: per
// block d = max|x|/127 stored as the nearest float16, q = round(x·(1/d)) with 1/d of the
// unrounded d, in float32. Quantize's Q8_0 differs (it rounds the scale up).
//
// On amd64 an AVX2 kernel does the same, bit for bit for finite x (TestQuantizeQ8_0Ref): it
// is paid per activation vector on the 8-bit Q8_0 path (DotRowsQ8_0).
func QuantizeQ8_0Ref(x []float32, dst []byte) {
	if len(dst) < len(x)/32*34 {
		panic(fmt.Sprintf("quant: QuantizeQ8_0Ref of %d values into %d bytes", len(x), len(dst)))
	}
	if quantizeQ8_0Fast(x, dst) {
		return
	}
	quantizeQ8_0Go(x, dst)
}

func quantizeQ8_0Go(x []float32, dst []byte) {
	const bs, ts = 32, 34
	for i := 0; i < len(x)/bs; i++ {
		blk, b := x[bs*i:bs*i+bs], dst[ts*i:ts*i+ts]
		var amax float32
		for _, v := range blk {
			amax = max(amax, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b, F32ToF16(d))
		q := b[2 : 2+bs]
		for j, v := range blk {
			q[j] = byte(int8(roundHalfAway(v * id)))
		}
	}
}

// roundHalfAway is math.Round(float64(v)) for |v| < 2³¹ (ggml's roundf), in float32 and
// integers: v minus its truncation is exact, so comparing it with ½ decides the rounding
// exactly, at a fraction of math.Round's cost (it is paid per activation on the 8-bit Q8_0
// path).
func roundHalfAway(v float32) int32 {
	t := int32(v)
	f := v - float32(t)
	if f >= 0.5 {
		t++
	} else if f <= -0.5 {
		t--
	}
	return t
}

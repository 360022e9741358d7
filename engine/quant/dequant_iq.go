package quant

import (
	"encoding/binary"
	"math/bits"
)

// The i-quants store, per group of 8 (or 4) weights, an index into a codebook (grids.go)
// and a 7-bit sign pattern; the eighth sign is implied by even parity, which is how ggml's
// ksigns table is built.

// iqSigns maps a 7-bit sign index to the full 8-bit sign mask.
var iqSigns = func() (t [128]byte) {
	for i := range t {
		t[i] = byte(i)
		if bits.OnesCount8(byte(i))%2 == 1 {
			t[i] |= 0x80
		}
	}
	return t
}()

// signOf is multiplied in rather than negating, to match ggml's "* (s ? -1.f : 1.f)"
// bit for bit even when the scale is NaN.
var signOf = [2]float32{1, -1}

func gridByte(g uint64, j int) float32 { return float32(byte(g >> (8 * j))) }

func deqIQ2_XXS(b []byte, y []float32) {
	d := half(b)
	qs := b[2:66]
	for ib := 0; ib < 8; ib++ {
		idx := qs[8*ib : 8*ib+4]
		aux := binary.LittleEndian.Uint32(qs[8*ib+4:])
		db := d * (0.5 + float32(aux>>28)) * 0.25
		for l := 0; l < 4; l++ {
			g := iq2xxsGrid[idx[l]]
			s := iqSigns[(aux>>(7*l))&127]
			for j := 0; j < 8; j++ {
				y[j] = db * gridByte(g, j) * signOf[s>>j&1]
			}
			y = y[8:]
		}
	}
}

func deqIQ2_XS(b []byte, y []float32) {
	d := half(b)
	qs := b[2:66]
	scales := b[66:74]
	for ib := 0; ib < 8; ib++ {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			q := binary.LittleEndian.Uint16(qs[2*(4*ib+l):])
			g := iq2xsGrid[q&511]
			s := iqSigns[q>>9]
			for j := 0; j < 8; j++ {
				y[j] = db[l/2] * gridByte(g, j) * signOf[s>>j&1]
			}
			y = y[8:]
		}
	}
}

func deqIQ2_S(b []byte, y []float32) {
	d := half(b)
	qs := b[2:34]
	signs := b[34:66]
	qh := b[66:74]
	scales := b[74:82]
	for ib := 0; ib < 8; ib++ {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			dl := db[l/2]
			g := iq2sGrid[int(qs[4*ib+l])|int(qh[ib])<<(8-2*l)&0x300]
			s := signs[4*ib+l]
			for j := 0; j < 8; j++ {
				y[j] = dl * gridByte(g, j) * signOf[s>>j&1]
			}
			y = y[8:]
		}
	}
}

func deqIQ3_XXS(b []byte, y []float32) {
	d := half(b)
	qs := b[2:66]
	ss := b[66:98]
	for ib := 0; ib < 8; ib++ {
		aux := binary.LittleEndian.Uint32(ss[4*ib:])
		db := d * (0.5 + float32(aux>>28)) * 0.5
		q := qs[8*ib:]
		for l := 0; l < 4; l++ {
			s := iqSigns[(aux>>(7*l))&127]
			g1 := uint64(iq3xxsGrid[q[2*l]])
			g2 := uint64(iq3xxsGrid[q[2*l+1]])
			for j := 0; j < 4; j++ {
				y[j] = db * gridByte(g1, j) * signOf[s>>j&1]
				y[j+4] = db * gridByte(g2, j) * signOf[s>>(j+4)&1]
			}
			y = y[8:]
		}
	}
}

func deqIQ3_S(b []byte, y []float32) {
	d := half(b)
	qs := b[2:66]
	qh := b[66:74]
	signs := b[74:106]
	scales := b[106:110]
	for ib := 0; ib < 8; ib++ {
		sc := scales[ib/2] >> (4 * (ib % 2)) & 0xf
		db := d * float32(1+2*int(sc))
		q := qs[8*ib:]
		h := int(qh[ib])
		sg := signs[4*ib:]
		for l := 0; l < 4; l++ {
			g1 := uint64(iq3sGrid[int(q[2*l])|(h<<(8-2*l))&256])
			g2 := uint64(iq3sGrid[int(q[2*l+1])|(h<<(7-2*l))&256])
			s := sg[l]
			for j := 0; j < 4; j++ {
				y[j] = db * gridByte(g1, j) * signOf[s>>j&1]
				y[j+4] = db * gridByte(g2, j) * signOf[s>>(j+4)&1]
			}
			y = y[8:]
		}
	}
}

// iq1Delta is the offset IQ1_S and IQ1_M add to every grid value (IQ1S_DELTA in ggml).
const iq1Delta = 0.125

func gridInt8(g uint64, j int) float32 { return float32(int8(byte(g >> (8 * j)))) }

func deqIQ1_S(b []byte, y []float32) {
	d := half(b)
	qs := b[2:34]
	qhb := b[34:50]
	for ib := 0; ib < 8; ib++ {
		qh := int(binary.LittleEndian.Uint16(qhb[2*ib:]))
		dl := d * float32(2*((qh>>12)&7)+1)
		delta := float32(iq1Delta)
		if qh&0x8000 != 0 {
			delta = -iq1Delta
		}
		for l := 0; l < 4; l++ {
			g := iq1sGrid[int(qs[4*ib+l])|((qh>>(3*l))&7)<<8]
			for j := 0; j < 8; j++ {
				y[j] = dl * (gridInt8(g, j) + delta)
			}
			y = y[8:]
		}
	}
}

func deqIQ1_M(b []byte, y []float32) {
	qs := b[0:32]
	qh := b[32:48]
	var sc [4]int
	for i := range sc {
		sc[i] = int(binary.LittleEndian.Uint16(b[48+2*i:]))
	}
	// The super-block scale is an f16 spread over the top nibbles of the four scale words.
	d := F16ToF32(uint16(sc[0]>>12 | (sc[1]>>8)&0x00f0 | (sc[2]>>4)&0x0f00 | sc[3]&0xf000))
	for ib := 0; ib < 8; ib++ {
		s := sc[ib/2] >> (6 * (ib % 2))
		dl := [2]float32{d * float32(2*(s&7)+1), d * float32(2*((s>>3)&7)+1)}
		idx, neg := iq1mGroups(qs, qh, ib)
		for l := 0; l < 4; l++ {
			delta := float32(iq1Delta)
			if neg[l] {
				delta = -iq1Delta
			}
			g := iq1sGrid[idx[l]]
			for j := 0; j < 8; j++ {
				y[j] = dl[l/2] * (gridInt8(g, j) + delta)
			}
			y = y[8:]
		}
	}
}

// iq1mGroups unpacks sub-block ib of an IQ1_M block: the grid index of each group of 8
// (8 bits in qs, 3 in qh) and whether its delta is negative.
func iq1mGroups(qs, qh []byte, ib int) (idx [4]int, neg [4]bool) {
	h0, h1 := int(qh[2*ib]), int(qh[2*ib+1])
	idx = [4]int{
		int(qs[4*ib+0]) | (h0<<8)&0x700,
		int(qs[4*ib+1]) | (h0<<4)&0x700,
		int(qs[4*ib+2]) | (h1<<8)&0x700,
		int(qs[4*ib+3]) | (h1<<4)&0x700,
	}
	neg = [4]bool{h0&0x08 != 0, h0&0x80 != 0, h1&0x08 != 0, h1&0x80 != 0}
	return idx, neg
}

func deqIQ4_NL(b []byte, y []float32) {
	d := half(b)
	for j, q := range b[2:18] {
		y[j] = d * float32(kvaluesIQ4NL[q&0xf])
		y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
	}
}

func deqIQ4_XS(b []byte, y []float32) {
	d := half(b)
	sh := int(binary.LittleEndian.Uint16(b[2:]))
	sl := b[4:8]
	qs := b[8:136]
	for ib := 0; ib < 8; ib++ {
		ls := int(sl[ib/2]>>(4*(ib%2)))&0xf | ((sh>>(2*ib))&3)<<4
		dl := d * float32(ls-32)
		for j, q := range qs[16*ib : 16*ib+16] {
			y[j] = dl * float32(kvaluesIQ4NL[q&0xf])
			y[j+16] = dl * float32(kvaluesIQ4NL[q>>4])
		}
		y = y[32:]
	}
}

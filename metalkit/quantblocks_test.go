package metalkit

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/redlite/batch/engine/quant"
)

// randomMatrix returns a [rows, cols] matrix of type t with random contents: random normal
// values quantized with engine/quant's encoders where it has one, otherwise random blocks
// whose scale fields are set to small positive halves (every bit pattern of the other
// fields is a valid block).
func randomMatrix(rng *rand.Rand, t quant.Type, rows, cols int) []byte {
	n := rows * cols
	out := make([]byte, rows*t.RowBytes(cols))
	switch t {
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_K, quant.Q6_K:
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		if err := quant.Quantize(t, v, out); err != nil {
			panic(err)
		}
		return out
	}
	for i := range out {
		out[i] = byte(rng.Uint32())
	}
	scale := func() uint16 { return quant.F32ToF16(float32(0.01 + 0.02*rng.Float64())) }
	ts := t.TypeSize()
	for o := 0; o < len(out); o += ts {
		b := out[o : o+ts]
		switch t {
		case quant.Q2_K:
			binary.LittleEndian.PutUint16(b[80:], scale())
			binary.LittleEndian.PutUint16(b[82:], scale())
		case quant.Q3_K:
			binary.LittleEndian.PutUint16(b[108:], scale())
		case quant.Q4_1, quant.Q5_1, quant.Q5_K:
			binary.LittleEndian.PutUint16(b[0:], scale())
			binary.LittleEndian.PutUint16(b[2:], scale())
		case quant.MXFP4:
			b[0] = byte(120 + rng.IntN(4)) // an exponent byte: scales 2^−8 … 2^−5
		case quant.IQ1_M:
			// The block scale is spread over the top nibbles of the four scale words.
			d := scale()
			for i := 0; i < 4; i++ {
				w := binary.LittleEndian.Uint16(b[48+2*i:])&0x0fff | (d>>(4*i)&0xf)<<12
				binary.LittleEndian.PutUint16(b[48+2*i:], w)
			}
		default:
			binary.LittleEndian.PutUint16(b[0:], scale())
		}
	}
	return out
}

// randomVector is n standard normal values.
func randomVector(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

package synth

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/redlite/batch/engine/quant"
)

// tensorSpec is one tensor to generate: normal(mean, std) values stored as typ.
type tensorSpec struct {
	name string
	dims []uint64 // ggml order: dims[0] is the row length
	typ  quant.Type
	mean float64
	std  float64
	// values, when set, are the tensor's exact contents (F32), written even in Layout mode:
	// constants such as Llama 3's rope_freqs that a loader checks.
	values []float32
}

func (t tensorSpec) elements() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// chunkElems is about how many values one random stream produces. Streams are per block of
// rows, so the work splits across cores while the values stay independent of the split.
const chunkElems = 1 << 16

// generator produces tensor bytes. It reuses one output buffer, which is safe because the
// GGUF writer writes each tensor's bytes before asking for the next tensor.
type generator struct {
	seed    uint64
	workers int
	zeros   bool // Options.Layout
	buf     []byte
}

// streamSeed derives the random stream of one block of rows of one tensor.
func streamSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix(seed ^ splitmix(h.Sum64()))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// fill generates t and returns its bytes (valid until the next call).
func (g *generator) fill(t tensorSpec) ([]byte, error) {
	rowLen := int(t.dims[0])
	rows := int(t.elements() / t.dims[0])
	rowBytes := t.typ.RowBytes(rowLen)
	if rowLen%t.typ.BlockSize() != 0 {
		return nil, fmt.Errorf("row length %d is not a multiple of %s's block size %d", rowLen, t.typ, t.typ.BlockSize())
	}
	size := rows * rowBytes
	if cap(g.buf) < size {
		g.buf = make([]byte, size)
	}
	out := g.buf[:size]
	if t.values != nil {
		if err := quant.Quantize(t.typ, t.values, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	if g.zeros {
		clear(out)
		return out, nil
	}
	perChunk := max(1, chunkElems/rowLen)
	chunks := (rows + perChunk - 1) / perChunk
	base := streamSeed(g.seed, t.name)

	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(g.workers, chunks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals := make([]float32, perChunk*rowLen)
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				r0, r1 := c*perChunk, min(rows, (c+1)*perChunk)
				v := vals[:(r1-r0)*rowLen]
				rng := rand.New(rand.NewPCG(base, uint64(c)))
				for i := range v {
					v[i] = float32(t.mean + t.std*rng.NormFloat64())
				}
				if err := quant.Quantize(t.typ, v, out[r0*rowBytes:r1*rowBytes]); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

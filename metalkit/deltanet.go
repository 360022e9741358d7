package metalkit

import (
	"fmt"

	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// deltaNetChunked selects the chunked form of the delta rule for more than two tokens
// (prefill); decode and two-token verification steps always run the recurrent form, as on
// the CPU, so a verified step computes what two single steps would. false runs every call
// token by token (the two forms agree up to rounding; tests run both).
var deltaNetChunked = true

// conv1dCausal is ml.Context.Conv1DCausal: x [n, channels], w the GGUF bytes of a
// {kernel, channels} weight (F32 or F16), state [kernel−1, channels] updated in place,
// y [n, channels].
func (e *encoder) conv1dCausal(x Region, n, channels int, w Region, wType quant.Type, kernel int, state, y Region) {
	if e.err != nil {
		return
	}
	var name string
	var wBytes int
	switch wType {
	case quant.F32:
		name, wBytes = "conv1d_causal_f32", 4
	case quant.F16:
		name, wBytes = "conv1d_causal_f16", 2
	default:
		e.err = fmt.Errorf("metalkit: causal convolution with a %v weight (want F32 or F16)", wType)
		return
	}
	if kernel < 1 || kernel > kernels.ConvMaxKernel || channels <= 0 || n < 0 {
		e.err = fmt.Errorf("metalkit: causal convolution of %d channels with a kernel of %d (at most %d)", channels, kernel, kernels.ConvMaxKernel)
		return
	}
	if n == 0 {
		return
	}
	err := regionsHold("conv1d", int64(4*n*channels), x, y)
	if err == nil {
		err = regionsHold("conv1d weight", int64(wBytes*kernel*channels), w)
	}
	if err == nil && kernel > 1 {
		err = regionsHold("conv1d state", int64(4*(kernel-1)*channels), state)
	}
	if err != nil {
		e.err = err
		return
	}
	if kernel == 1 {
		state = y // no window: the kernel never touches it
	}
	e.dispatch(name, nil, [3]int{(channels + kernels.ConvThreads - 1) / kernels.ConvThreads, 1, 1}, [3]int{kernels.ConvThreads, 1, 1}, 0,
		convCost(n, channels, kernel, wBytes),
		kernels.Conv1DCausalArgs{N: int32(n), Channels: int32(channels), Taps: int32(kernel)},
		x, w, state, y)
}

// convCost: x, the weight and the window in, y and the window out; a multiply-add per tap.
func convCost(n, channels, kernel, wBytes int) device.Cost {
	st := int64(4 * (kernel - 1) * channels)
	return device.Cost{
		Label:   "conv1d",
		Read:    int64(4*n*channels) + int64(wBytes*kernel*channels) + st,
		Written: int64(4*n*channels) + st,
		FLOPs:   2 * int64(n) * int64(channels) * int64(kernel),
	}
}

// deltaNet is ml.Context.DeltaNet: q, k [n, kHeads, dk], v [n, vHeads, dv], g and beta
// [n, vHeads], the state [vHeads, dv, dk] updated in place, out [n, vHeads, dv].
func (e *encoder) deltaNet(q, k, v, g, beta, state Region, n, kHeads, vHeads, dk, dv int, scale float32, out Region) {
	if e.err != nil {
		return
	}
	if n < 0 || kHeads <= 0 || vHeads <= 0 || vHeads%kHeads != 0 || dv <= 0 {
		e.err = fmt.Errorf("metalkit: delta rule of %d key heads and %d value heads of %d", kHeads, vHeads, dv)
		return
	}
	if dk <= 0 || dk%32 != 0 || dk > kernels.DNMaxDK {
		// Each lane holds dk/32 features of every state row it keeps.
		e.err = fmt.Errorf("metalkit: delta rule needs keys of a multiple of 32 features up to %d, not %d", kernels.DNMaxDK, dk)
		return
	}
	if n == 0 {
		return
	}
	err := regionsHold("delta net q, k", int64(4*n*kHeads*dk), q, k)
	if err == nil {
		err = regionsHold("delta net v, out", int64(4*n*vHeads*dv), v, out)
	}
	if err == nil {
		err = regionsHold("delta net g, beta", int64(4*n*vHeads), g, beta)
	}
	if err == nil {
		err = regionsHold("delta net state", int64(4*vHeads*dv*dk), state)
	}
	if err != nil {
		e.err = err
		return
	}
	args := kernels.DeltaNetArgs{N: int32(n), KHeads: int32(kHeads), VHeads: int32(vHeads), DK: int32(dk), DV: int32(dv), Scale: scale}
	const sgs = kernels.DNThreads / 32
	if n <= 2 || !deltaNetChunked {
		rows := sgs * kernels.DNTokenRows
		args.Chunk = 1
		e.dispatch("deltanet_f32", nil, [3]int{(dv + rows - 1) / rows, vHeads, 1}, [3]int{kernels.DNThreads, 1, 1}, 0,
			deltaNetCost(n, kHeads, vHeads, dk, dv, 1, 1), args, q, k, v, g, beta, state, out)
		return
	}
	c := deltaChunk(dk)
	rows := sgs * kernels.DNChunkRows
	args.Chunk = int32(c)
	blocks := (dv + rows - 1) / rows
	// Metal takes threadgroup memory in multiples of 16 bytes.
	shared := (4*(2*c*dk+2*c*c+2*c+2*c*rows) + 15) &^ 15
	e.dispatch("deltanet_chunk_f32", nil, [3]int{blocks, vHeads, 1}, [3]int{kernels.DNThreads, 1, 1}, shared,
		deltaNetCost(n, kHeads, vHeads, dk, dv, c, blocks), args, q, k, v, g, beta, state, out)
}

// deltaChunk is the chunk of the chunked form: its threadgroup memory (k and W_k, c×dk
// floats each, and c×32 rows' deltas and outputs) stays under Metal's 32 KiB, 22.6 KiB at
// Qwen3-Next's dk of 128.
func deltaChunk(dk int) int {
	if dk <= 128 {
		return kernels.DNMaxChunk
	}
	return kernels.DNMaxChunk / 2
}

// deltaNetCost: the state is read and written once per call, the inputs read once (the
// chunked form reads its chunk's keys once per block of rows); per token and head the rule
// is about 7·dk·dv FLOPs (decay, Sᵀk, the rank-1 update and Sᵀq), and the chunked form adds
// per chunk and block the c² key products and the c²·dk substitution.
func deltaNetCost(n, kHeads, vHeads, dk, dv, chunk, blocks int) device.Cost {
	st := int64(4 * vHeads * dv * dk)
	in := int64(4*n*kHeads*dk)*2 + int64(4*n*vHeads*dv) + int64(8*n*vHeads)
	flops := 7 * int64(n) * int64(vHeads) * int64(dk) * int64(dv)
	label := "deltanet"
	if chunk > 1 {
		label = "deltanet chunked"
		in += int64(blocks-1) * int64(4*n*kHeads*dk) * 2
		chunks := int64((n + chunk - 1) / chunk)
		flops += chunks * int64(blocks) * int64(vHeads) * int64(chunk*chunk) * int64(2*dk+dk)
	}
	return device.Cost{Label: label, Read: st + in, Written: st + int64(4*n*vHeads*dv), FLOPs: flops}
}

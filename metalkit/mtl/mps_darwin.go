//go:build darwin

package mtl

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/redlite/batch/metalkit/device"
)

// Dense products through MetalPerformanceShaders (device.GEMMEncoder): Red Lite measured
// MPSMatrixMultiplication in float32 at 12.6–12.9 TFLOPS against 10.1–10.8 for its own
// tiled GEMM on the 2048-token prefill projections of an M4 Max. MPS encodes its own
// kernels on a command buffer, not into a compute encoder, so the pass's open compute
// encoder is ended before the product and a new one opened by the next dispatch; within the
// command buffer Metal orders the encoders and tracks the buffers they share.

var (
	mpsOnce sync.Once
	mpsErr  error
)

// openMPS loads MetalPerformanceShaders.framework, once, on the first product (a pass
// without one never needs it).
func openMPS() error {
	mpsOnce.Do(func() {
		if _, err := purego.Dlopen("/System/Library/Frameworks/MetalPerformanceShaders.framework/MetalPerformanceShaders", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			mpsErr = fmt.Errorf("MetalPerformanceShaders: %w: %v", ErrUnavailable, err)
		}
	})
	return mpsErr
}

// gemmCacheMax bounds the kernels kept: the token count is part of the shape, and a daemon
// sees prompts of every length. Past it the cache starts over; releasing a kernel already
// encoded is safe (the command buffer holds what it runs, as when a Swift caller's kernel
// goes out of scope before the commit).
const gemmCacheMax = 64

// EncodeGEMM encodes g into cmd (a command list of this device) in order with its
// dispatches.
func (d *Device) EncodeGEMM(cmd device.Commands, g device.GEMM) {
	c, ok := cmd.(*commands)
	if !ok || c.d != d {
		// Not ours: nothing to fail but the caller's list, which we cannot reach.
		panic(fmt.Sprintf("mtl: EncodeGEMM on a command list %T of another device", cmd))
	}
	c.encodeGEMM(g)
}

// mpsDataType is MPSDataType: MPSDataTypeFloatBit (0x10000000) | bits.
func mpsDataType(t device.DataType) uint32 { return 0x10000000 | uint32(8*t.Size()) }

func (c *commands) encodeGEMM(g device.GEMM) {
	const op = "encode"
	kernel := "MPSMatrixMultiplication " + g.Cost.Label
	if c.committed {
		c.fail(&device.Error{Op: op, Kernel: kernel, Err: errors.New("encoding after Commit")})
		return
	}
	if c.err != nil {
		return
	}
	if err := g.Check(); err != nil {
		c.fail(&device.Error{Op: op, Kernel: kernel, Err: err})
		return
	}
	for _, m := range []device.Matrix{g.A, g.B, g.C} {
		if mb, ok := m.Buffer.(*buffer); !ok || mb.dev != c.d {
			c.fail(&device.Error{Op: op, Kernel: kernel, Err: errors.New("a matrix in a buffer this device did not make")})
			return
		}
	}
	if err := openMPS(); err != nil {
		c.fail(&device.Error{Op: op, Kernel: kernel, Err: err})
		return
	}
	c.enter()
	func() {
		kern, err := c.d.gemmKernel(gemmShape{g.M, g.N, g.K})
		if err != nil {
			c.fail(&device.Error{Op: op, Kernel: kernel, Err: err})
			return
		}
		defer msgRelease.send(kern)
		if !c.newBuffer() {
			return
		}
		c.closeEncoder()
		a := newMatrix(g.A, g.M, g.K)
		b := newMatrix(g.B, g.N, g.K)
		r := newMatrix(g.C, g.M, g.N)
		defer func() {
			for _, x := range []id{a, b, r} {
				if x != 0 {
					msgRelease.send(x)
				}
			}
		}()
		if a == 0 || b == 0 || r == 0 {
			c.fail(&device.Error{Op: op, Kernel: kernel, Err: errors.New("MPSMatrix refused a matrix")})
			return
		}
		msgEncodeMatrixMultiplication.send(kern, c.cb, a, b, r)
		c.encoded++
		c.inBuffer++
		if c.inBuffer >= splitAfter(len(c.done)) {
			c.submit()
		}
	}()
}

// newMatrix makes an MPSMatrix (+1) over m, rows×cols; 0 if MPS refuses it.
func newMatrix(m device.Matrix, rows, cols int) id {
	// The descriptor comes back autoreleased (the caller's pool).
	desc := msgMatrixDescriptor.send(classMPSMatrixDescriptor.get(), uint(rows), uint(cols), uint(m.RowBytes), mpsDataType(m.Type))
	if desc == 0 {
		return 0
	}
	return msgInitWithBufferOffsetDesc.send(msgAlloc.send(classMPSMatrix.get()), m.Buffer.(*buffer).obj, uint(m.Offset), desc)
}

// gemmKernel returns the product kernel of a shape, retained for the caller (another pass
// may start the cache over meanwhile): C = A · Bᵀ (transposeRight: B is
// stored a row per output feature), alpha 1, beta 0 (C is overwritten).
func (d *Device) gemmKernel(s gemmShape) (id, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, errors.New("device closed")
	}
	if k, ok := d.gemms[s]; ok {
		return msgRetain.send(k), nil
	}
	k := msgInitMatrixMultiplication.send(msgAlloc.send(classMPSMatrixMultiplication.get()), d.dev, false, true, uint(s.m), uint(s.n), uint(s.k), 1, 0)
	if k == 0 {
		return 0, fmt.Errorf("MPSMatrixMultiplication of %d×%d by %d×%d refused", s.m, s.k, s.k, s.n)
	}
	if d.gemms == nil || len(d.gemms) >= gemmCacheMax {
		for _, old := range d.gemms {
			msgRelease.send(old)
		}
		d.gemms = map[gemmShape]id{}
	}
	d.gemms[s] = k
	return msgRetain.send(k), nil
}

var _ device.GEMMEncoder = (*Device)(nil)

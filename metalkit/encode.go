package metalkit

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/redlite/batch/metalkit/device"
)

// Region is a byte range of a device buffer: where a tensor, a weight or a cache block lives.
type Region struct {
	Buf device.Buffer
	Off int64
	Len int64
}

// Sub is the part of r from off, n bytes long.
func (r Region) Sub(off, n int64) Region {
	if off < 0 || n < 0 || off+n > r.Len {
		panic(fmt.Sprintf("metalkit: region [%d, %d) outside a region of %d bytes", off, off+n, r.Len))
	}
	return Region{Buf: r.Buf, Off: r.Off + off, Len: n}
}

// encoder encodes the dispatches of one pass: kernels are looked up by name and function
// constants, argument structs are copied as bytes, and regions are bound in order.
//
// Conventions every kernel follows (kernels/README.md): the argument struct declared in
// kernels/args.h is at [[buffer(0)]], the regions follow at [[buffer(1)]], [[buffer(2)]], …
type encoder struct {
	dev device.Device
	cmd device.Commands
	err error // the first failure; later calls do nothing
	// sync commits what is encoded, waits for it and starts a new command list (the host
	// reads a routing result mid-pass: experts.go); nil outside a context's Compute.
	sync func()
}

// dispatch encodes kernel name over groups threadgroups of threads threads. args is a
// struct mirroring the kernel's argument struct in args.h field by field (fixed-size
// fields, explicit padding: its encoding/binary layout is the C layout, which a test
// checks against clang's).
func (e *encoder) dispatch(name string, consts []device.Constant, groups, threads [3]int, shared int, cost device.Cost, args any, regions ...Region) {
	e.dispatchWith(nil, name, consts, groups, threads, shared, cost, args, regions...)
}

// dispatchWith is dispatch with more small arguments copied at encoding time (setBytes) at
// the indices after the regions': an expert product's slot table.
func (e *encoder) dispatchWith(extra [][]byte, name string, consts []device.Constant, groups, threads [3]int, shared int, cost device.Cost, args any, regions ...Region) {
	if e.err != nil {
		return
	}
	p, err := e.dev.Pipeline(name, consts...)
	if err != nil {
		e.err = err
		return
	}
	if total := shared + p.StaticShared(); total > device.MaxThreadgroupMemory {
		e.err = fmt.Errorf("metalkit: %s needs %d bytes of threadgroup memory (%d declared by the kernel, %d for this dispatch), more than the %d a threadgroup has",
			name, total, p.StaticShared(), shared, device.MaxThreadgroupMemory)
		return
	}
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, args); err != nil {
		e.err = fmt.Errorf("metalkit: arguments of %s: %w", name, err)
		return
	}
	d := device.Dispatch{
		Pipeline: p,
		Groups:   groups,
		Threads:  threads,
		Bytes:    []device.BytesArg{{Index: 0, Data: buf.Bytes()}},
		Cost:     cost,
	}
	if cost.Label == "" {
		d.Cost.Label = name
	}
	for i, r := range regions {
		d.Buffers = append(d.Buffers, device.BufferArg{Index: i + 1, Buffer: r.Buf, Offset: r.Off, Length: r.Len})
	}
	for i, b := range extra {
		d.Bytes = append(d.Bytes, device.BytesArg{Index: len(regions) + 1 + i, Data: b})
	}
	if shared > 0 {
		d.Shared = []device.SharedArg{{Index: 0, Size: shared}}
	}
	e.cmd.Encode(d)
}

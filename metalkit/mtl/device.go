package mtl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/redlite/batch/metalkit/device"
)

// The Metal device over an Objective-C runtime (runtime.go): libobjc and Metal on a Mac
// (mtl_darwin.go), a stand-in C library on Linux, where its host side is tested and
// measured (package standin). Nothing here touches the runtime but through msg.go's
// declarations.

// Autorelease pools: objects Metal and Foundation return autoreleased (command buffers,
// encoders, NSErrors, names, MPS descriptors), and whatever Metal autoreleases inside a
// message, are freed when the pool they went into is popped. A thread with no pool would
// keep them for its life, and Go's threads live as long as the process. A pool belongs to
// the thread that pushed it and pools pop in order, while a goroutine may move between
// threads: so the goroutine is locked to its thread from push to pop.
//
// A call of the device runs in a pool of its own (withPool); a pass runs in one pool from
// its first Encode to its Wait (commands.enter), so that the messages of its dispatches,
// which are most of what the device sends, are inside one without two more C calls each.

// withPool runs f inside an autorelease pool on one OS thread.
func withPool(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := poolPush()
	defer poolPop(pool)
	f()
}

// goString copies an NSString.
func goString(s id) string {
	if s == 0 {
		return ""
	}
	return msgUTF8String.send(s)
}

// newString makes an NSString the caller releases.
func newString(s string) id {
	return msgInitWithCStringEncoding.send(msgAlloc.send(classNSString.get()), cStringOf(s), utf8StringEncoding)
}

// errorText is an NSError's localizedDescription.
func errorText(e id) string {
	if e == 0 {
		return "no error description"
	}
	return goString(msgLocalizedDescription.send(e))
}

// Device is the Metal device: one MTLDevice, one command queue and the library compiled
// from the kernel source.
type Device struct {
	dev, queue, lib id
	name            string
	maxBuffer       int64
	page            int64

	mu        sync.Mutex
	pipelines map[string]*pipeline
	gemms     map[gemmShape]id // MPSMatrixMultiplication kernels by shape (mps_darwin.go)
	closed    bool
}

// newDevice opens the default Metal device of the installed runtime and compiles source
// (metalkit/kernels.Source()) into its library.
func newDevice(source string) (*Device, error) {
	d := &Device{page: int64(os.Getpagesize()), pipelines: map[string]*pipeline{}}
	var err error
	withPool(func() {
		d.dev = createDevice()
		if d.dev == 0 {
			err = ErrUnavailable
			return
		}
		d.name = goString(msgName.send(d.dev))
		// Checked at open, so that a GPU the kernels cannot run on (SIMD-group matrices,
		// 32 KiB of threadgroup memory) fails here, by name, not in a kernel.
		if !msgSupportsFamily.send(d.dev, gpuFamilyApple7) || !msgSupportsFamily.send(d.dev, gpuFamilyMetal3) {
			err = fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrUnsupportedGPU, d.name)
			return
		}
		d.maxBuffer = int64(msgMaxBufferLength.send(d.dev))
		if d.queue = msgNewCommandQueue.send(d.dev); d.queue == 0 {
			err = &device.Error{Op: "new command queue", Err: errors.New("the device made none")}
			return
		}
		d.lib, err = d.compile(source)
	})
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// compile builds the library. Fast math is off: Metal compiles with it on by default,
// which lets the compiler assume there are no infinities or NaNs and reassociate sums —
// our kernels mask with -INFINITY in softmax and are checked against the CPU backend
// within tight tolerances, so they need IEEE behaviour (MTLMathModeSafe and precise
// math functions on macOS 15+, where fastMathEnabled is deprecated; fastMathEnabled = NO
// before). The language version is pinned to Metal 3.0 (macOS 13 and later, every Apple
// Silicon Mac can run it) so the same source means the same thing on every Mac rather than
// whatever the installed compiler defaults to.
func (d *Device) compile(source string) (id, error) {
	opts := msgInit.send(msgAlloc.send(classMTLCompileOptions.get()))
	if opts == 0 {
		return 0, &device.Error{Op: "compile", Err: errors.New("could not make MTLCompileOptions")}
	}
	defer msgRelease.send(opts)
	if msgRespondsToSelector.send(opts, msgSetMathMode.selector()) {
		msgSetMathMode.send(opts, mathModeSafe)
		msgSetMathFloatingPointFunctions.send(opts, mathFloatingPointFunctionsPrecise)
	} else {
		msgSetFastMathEnabled.send(opts, false)
	}
	msgSetLanguageVersion.send(opts, languageVersion3_0)

	src := newString(source)
	if src == 0 {
		return 0, &device.Error{Op: "compile", Err: errors.New("kernel source is not valid UTF-8 text")}
	}
	defer msgRelease.send(src)
	var nserr id
	lib := msgNewLibraryWithSource.send(d.dev, src, opts, &nserr)
	if lib == 0 {
		// The compiler's message names the file, line and column of each error.
		return 0, &device.Error{Op: "compile", Err: fmt.Errorf("the Metal library does not compile (language version 3.0, needs macOS 13 or later): %s", errorText(nserr))}
	}
	return lib, nil
}

func (d *Device) Name() string           { return d.name }
func (d *Device) MaxBufferLength() int64 { return d.maxBuffer }

// Facts reads this device's facts now.
func (d *Device) Facts() Facts {
	var f Facts
	withPool(func() {
		f = Facts{
			Name:                     d.name,
			RecommendedMaxWorkingSet: msgRecommendedMaxWorkingSetSize.send(d.dev),
			CurrentAllocated:         uint64(msgCurrentAllocatedSize.send(d.dev)),
			UnifiedMemory:            msgHasUnifiedMemory.send(d.dev),
		}
	})
	return f
}

// Close releases the pipelines, the library, the queue and the device.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	for _, p := range d.pipelines {
		msgRelease.send(p.obj)
	}
	d.pipelines = nil
	for _, k := range d.gemms {
		msgRelease.send(k)
	}
	d.gemms = nil
	for _, o := range []id{d.lib, d.queue, d.dev} {
		if o != 0 {
			msgRelease.send(o)
		}
	}
	return nil
}

// gemmShape keys the MPSMatrixMultiplication kernels: one object per shape, as Red Lite
// keeps them (the kernel fixes the sizes at initialisation).
type gemmShape struct{ m, n, k int }

type pipeline struct {
	obj          id
	name         string
	maxThreads   int
	simdWidth    int
	staticShared int
}

func (p *pipeline) Name() string      { return p.name }
func (p *pipeline) MaxThreads() int   { return p.maxThreads }
func (p *pipeline) SIMDWidth() int    { return p.simdWidth }
func (p *pipeline) StaticShared() int { return p.staticShared }

// Pipeline compiles kernel name specialised with consts, once per name and constants.
func (d *Device) Pipeline(name string, consts ...device.Constant) (device.Pipeline, error) {
	key, err := pipelineKey(name, consts)
	if err != nil {
		return nil, &device.Error{Op: "pipeline " + name, Err: err}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.pipelines[key]; ok {
		return p, nil
	}
	if d.closed {
		return nil, &device.Error{Op: "pipeline " + name, Err: errors.New("device closed")}
	}
	withPool(func() {
		var p *pipeline
		if p, err = d.newPipeline(name, consts); err == nil {
			d.pipelines[key] = p
		}
	})
	if err != nil {
		return nil, &device.Error{Op: "pipeline " + name, Err: err}
	}
	return d.pipelines[key], nil
}

func (d *Device) newPipeline(name string, consts []device.Constant) (*pipeline, error) {
	values := msgInit.send(msgAlloc.send(classMTLFunctionConstantValues.get()))
	if values == 0 {
		return nil, errors.New("could not make MTLFunctionConstantValues")
	}
	defer msgRelease.send(values)
	for _, c := range consts {
		t, data, err := constantValue(c)
		if err != nil {
			return nil, err
		}
		// Metal copies the value.
		msgSetConstantValue.send(values, unsafe.Pointer(&data[0]), t, uint(c.Index))
		runtime.KeepAlive(data)
	}
	fname := newString(name)
	defer msgRelease.send(fname)
	var nserr id
	fn := msgNewFunctionWithNameConstValues.send(d.lib, fname, values, &nserr)
	if fn == 0 {
		return nil, fmt.Errorf("function: %s", errorText(nserr))
	}
	defer msgRelease.send(fn)
	nserr = 0
	obj := msgNewComputePipelineState.send(d.dev, fn, &nserr)
	if obj == 0 {
		return nil, fmt.Errorf("compute pipeline: %s", errorText(nserr))
	}
	return &pipeline{
		obj:          obj,
		name:         name,
		maxThreads:   int(msgMaxTotalThreadsPerThreadgroup.send(obj)),
		simdWidth:    int(msgThreadExecutionWidth.send(obj)),
		staticShared: int(msgStaticThreadgroupMemoryLength.send(obj)),
	}, nil
}

// buffer is an MTLBuffer in shared storage: the host reads and writes its contents in place.
type buffer struct {
	dev      *Device
	obj      id
	contents []byte // the n bytes the buffer reports, over its storage
	wrapped  []byte // a no-copy buffer's host memory, kept alive while the buffer lives
	mu       sync.Mutex
	released bool
}

func (b *buffer) Len() int64 { return int64(len(b.contents)) }

func (b *buffer) Write(off int64, src []byte) error {
	if b.wrapped != nil {
		return &device.Error{Op: "write", Err: errWrapWrite}
	}
	if err := checkRange(off, int64(len(src)), b.Len()); err != nil {
		return &device.Error{Op: "write", Err: err}
	}
	copy(b.contents[off:], src)
	return nil
}

func (b *buffer) Read(off int64, dst []byte) error {
	if err := checkRange(off, int64(len(dst)), b.Len()); err != nil {
		return &device.Error{Op: "read", Err: err}
	}
	copy(dst, b.contents[off:])
	return nil
}

func (b *buffer) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	b.released = true
	msgRelease.send(b.obj)
	b.contents, b.wrapped = nil, nil
}

// NewBuffer allocates size bytes of shared storage; Metal zero-fills new buffers.
func (d *Device) NewBuffer(size int64) (device.Buffer, error) {
	if size < 0 || size > d.maxBuffer {
		return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("%d bytes (the device's maxBufferLength is %d): %w", size, d.maxBuffer, device.ErrOutOfMemory)}
	}
	// Metal makes no empty buffer; a zero-length one still has a page behind it.
	obj := msgNewBufferWithLength.send(d.dev, uint(max(size, 1)), resourceStorageModeShared)
	if obj == 0 {
		return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("%d bytes: %w", size, device.ErrOutOfMemory)}
	}
	if got := int64(msgLength.send(obj)); got < max(size, 1) {
		msgRelease.send(obj)
		return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("asked for %d bytes, got a buffer of %d", size, got)}
	}
	ptr := msgContents.send(obj)
	return &buffer{dev: d, obj: obj, contents: unsafe.Slice((*byte)(ptr), max(size, 1))[:size]}, nil
}

// WrapBuffer binds data in place (newBufferWithBytesNoCopy): data must start on a page
// boundary (noCopyLength says why, and how its end is rounded).
func (d *Device) WrapBuffer(data []byte) (device.Buffer, error) {
	if len(data) == 0 {
		return nil, &device.Error{Op: "wrap buffer", Err: errors.New("no bytes")}
	}
	ptr := unsafe.Pointer(&data[0])
	n, err := noCopyLength(uintptr(ptr), int64(len(data)), d.page)
	if err != nil {
		return nil, &device.Error{Op: "wrap buffer", Err: err}
	}
	if n > d.maxBuffer {
		return nil, &device.Error{Op: "wrap buffer", Err: fmt.Errorf("%d bytes (the device's maxBufferLength is %d): split the mapping: %w", n, d.maxBuffer, device.ErrOutOfMemory)}
	}
	// No deallocator: the memory is the caller's (the file mapping) and outlives the buffer.
	obj := msgNewBufferWithBytesNoCopy.send(d.dev, ptr, uint(n), resourceStorageModeShared, 0)
	if obj == 0 {
		return nil, &device.Error{Op: "wrap buffer", Err: fmt.Errorf("%d bytes at %p: %w", n, ptr, device.ErrOutOfMemory)}
	}
	return &buffer{dev: d, obj: obj, contents: data, wrapped: data}, nil
}

// NewCommands starts a pass; see splitAfter for how it is cut into command buffers. Its
// Encode, Commit and Wait are called from one goroutine, and Wait is called (device.Commands):
// the pass's autorelease pool is popped there.
func (d *Device) NewCommands() device.Commands { return &commands{d: d} }

// commands encodes a pass into a sequence of command buffers, each with one serial compute
// encoder, committed as they fill (splitAfter) and at Commit.
type commands struct {
	d *Device

	cb, enc  id // the command buffer being encoded (0 between buffers) and its open compute encoder (0 between encoders)
	inBuffer int
	pipeline id // the last pipeline set on enc, to skip redundant sets

	// enc's buffer argument table as we set it, to skip redundant binds: the buffer and
	// offset at each index (0 where none is, or setBytes replaced it), and the threadgroup
	// memory lengths. bufs and offs are also the arrays setBuffers:offsets:withRange: reads.
	bufs   [maxBindings]id
	offs   [maxBindings]uint
	shared [maxBindings]int

	done    []submitted
	encoded int // dispatches encoded in the pass

	// The MTLSize arguments of the dispatch being encoded: arm64 passes each as a pointer
	// to a copy (msg_call.go), and these copies are on the heap with c; and the words of
	// each message a dispatch sends.
	groups, threads mtlSize
	words           callWords

	// The pass's autorelease pool, from its first message to Wait (enter, leave).
	pool   uintptr
	pooled bool

	committed, waited bool
	err               error // the first encoding error; the pass stops encoding there
	result            error
}

// submitted is a committed command buffer and the dispatches it holds, for naming a failure.
type submitted struct {
	cb          id
	first, last int
}

func (c *commands) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func (c *commands) Encode(d device.Dispatch) {
	if c.committed {
		c.fail(&device.Error{Op: "encode", Kernel: pipelineName(d.Pipeline), Err: errors.New("encoding after Commit")})
		return
	}
	if c.err != nil {
		return
	}
	p, ok := d.Pipeline.(*pipeline)
	if !ok {
		c.fail(&device.Error{Op: "encode", Kernel: pipelineName(d.Pipeline), Err: fmt.Errorf("pipeline %T is not a Metal pipeline", d.Pipeline)})
		return
	}
	if err := checkDispatch(d, p.maxThreads); err != nil {
		c.fail(&device.Error{Op: "encode", Kernel: p.name, Err: err})
		return
	}
	for _, b := range d.Buffers {
		if mb, ok := b.Buffer.(*buffer); !ok || mb.dev != c.d {
			c.fail(&device.Error{Op: "encode", Kernel: p.name, Err: fmt.Errorf("buffer %d was not made by this device", b.Index)})
			return
		}
	}
	c.enter()
	if c.enc == 0 && !c.open() {
		return
	}
	if p.obj != c.pipeline {
		msgSetComputePipelineState.sendOn(&c.words, c.enc, p.obj)
		c.pipeline = p.obj
	}
	c.bind(d.Buffers)
	for _, b := range d.Bytes {
		// Metal copies the bytes now. They replace a buffer bound at the index.
		msgSetBytes.sendOn(&c.words, c.enc, unsafe.Pointer(&b.Data[0]), uint(len(b.Data)), uint(b.Index))
		c.bufs[b.Index], c.offs[b.Index] = 0, 0
	}
	for _, s := range d.Shared {
		if n := sharedLength(s.Size); c.shared[s.Index] != n {
			msgSetThreadgroupMemoryLength.sendOn(&c.words, c.enc, uint(n), uint(s.Index))
			c.shared[s.Index] = n
		}
	}
	c.groups, c.threads = sizeOf(d.Groups), sizeOf(d.Threads)
	msgDispatchThreadgroups.sendOn(&c.words, c.enc, &c.groups, &c.threads)
	runtime.KeepAlive(d.Bytes)
	c.encoded++
	c.inBuffer++
	if c.inBuffer >= splitAfter(len(c.done)) {
		c.submit()
	}
}

// enter pushes the pass's autorelease pool before its first message, and locks the
// goroutine to its thread until Wait pops it.
func (c *commands) enter() {
	if !c.pooled {
		runtime.LockOSThread()
		c.pool, c.pooled = poolPush(), true
	}
}

// leave pops the pass's pool, if it has one.
func (c *commands) leave() {
	if c.pooled {
		poolPop(c.pool)
		c.pooled = false
		runtime.UnlockOSThread()
	}
}

// bind sets the buffers of a dispatch whose binding changed: a run of consecutive indices in
// one message (setBuffers:offsets:withRange:), a single index with setBuffer:offset:atIndex:.
// The indices between runs keep what they have (a setBytes struct, say).
func (c *commands) bind(args []device.BufferArg) {
	var changed [maxBindings]bool
	lo, hi := maxBindings, -1
	for _, b := range args {
		obj, off := b.Buffer.(*buffer).obj, uint(b.Offset)
		if c.bufs[b.Index] != obj || c.offs[b.Index] != off {
			c.bufs[b.Index], c.offs[b.Index] = obj, off
			changed[b.Index] = true
			lo, hi = min(lo, b.Index), max(hi, b.Index)
		}
	}
	for i := lo; i <= hi; {
		if !changed[i] {
			i++
			continue
		}
		j := i
		for j+1 <= hi && changed[j+1] {
			j++
		}
		if i == j {
			msgSetBuffer.sendOn(&c.words, c.enc, c.bufs[i], c.offs[i], uint(i))
		} else {
			msgSetBuffers.sendOn(&c.words, c.enc, &c.bufs[i], &c.offs[i], nsRange{Location: uint(i), Length: uint(j - i + 1)})
		}
		i = j + 1
	}
}

func pipelineName(p device.Pipeline) string {
	if p == nil {
		return ""
	}
	return p.Name()
}

// open starts a compute encoder, and a command buffer first when there is none, both
// retained: they come back autoreleased. A command buffer may hold several encoders in
// sequence: an MPS product is encoded on the command buffer between two of them (mps.go).
func (c *commands) open() bool {
	if !c.newBuffer() {
		return false
	}
	enc := msgComputeCommandEncoder.send(c.cb)
	if enc == 0 {
		c.fail(&device.Error{Op: "new compute encoder", Err: errors.New("the command buffer made none")})
		return false
	}
	c.enc = msgRetain.send(enc)
	c.pipeline = 0
	c.bufs, c.offs, c.shared = [maxBindings]id{}, [maxBindings]uint{}, [maxBindings]int{}
	return true
}

// newBuffer starts a command buffer (retained) when none is being encoded.
func (c *commands) newBuffer() bool {
	if c.cb != 0 {
		return true
	}
	cb := msgCommandBuffer.send(c.d.queue)
	if cb == 0 {
		c.fail(&device.Error{Op: "new command buffer", Err: errors.New("the queue made none")})
		return false
	}
	c.cb, c.inBuffer = msgRetain.send(cb), 0
	return true
}

// closeEncoder ends the open compute encoder, if any; the command buffer stays.
func (c *commands) closeEncoder() {
	if c.enc != 0 {
		msgEndEncoding.send(c.enc)
		msgRelease.send(c.enc)
		c.enc = 0
	}
}

// submit ends the current encoder and commits its command buffer.
func (c *commands) submit() {
	c.closeEncoder()
	msgCommit.send(c.cb)
	c.done = append(c.done, submitted{cb: c.cb, first: c.encoded - c.inBuffer, last: c.encoded - 1})
	c.cb, c.enc, c.inBuffer = 0, 0, 0
}

func (c *commands) Commit() {
	if c.committed {
		return
	}
	c.committed = true
	if c.cb == 0 {
		return
	}
	c.enter()
	if c.err != nil {
		// Do not run a buffer that stops in the middle of the pass: end it unrun.
		c.closeEncoder()
		msgRelease.send(c.cb)
		c.cb, c.enc = 0, 0
		return
	}
	c.submit()
}

// Wait waits for every committed command buffer, in order, and returns the first failure:
// an encoding error, or a command buffer's error (out of memory wraps ErrOutOfMemory).
func (c *commands) Wait() error {
	if c.waited {
		return c.result
	}
	c.waited = true
	var abandoned error
	if !c.committed {
		// The caller gives up on the list (device.Commands): what was not committed is
		// ended unrun; what was still runs and is waited for, since its buffers are about
		// to be reused.
		abandoned = &device.Error{Op: "wait", Err: errors.New("Wait before Commit: the list was abandoned unrun")}
		c.committed = true
		if c.cb != 0 {
			c.enter()
			c.closeEncoder()
			msgRelease.send(c.cb)
			c.cb, c.enc = 0, 0
		}
	}
	var failed error
	c.enter()
	func() {
		defer c.leave()
		for i, s := range c.done {
			msgWaitUntilCompleted.send(s.cb)
			if failed == nil && msgStatus.send(s.cb) == statusError {
				e := msgError.send(s.cb)
				op := fmt.Sprintf("command buffer %d of %d (dispatches %d to %d)", i+1, len(c.done), s.first, s.last)
				var code int64
				var domain string
				if e != 0 {
					code = int64(msgCode.send(e))
					domain = goString(msgDomain.send(e))
				}
				failed = commandBufferError(op, code, domain, errorText(e))
			}
			msgRelease.send(s.cb)
		}
	}()
	c.done = nil
	switch {
	case c.err != nil:
		c.result = c.err
	case failed != nil:
		c.result = failed
	case abandoned != nil:
		c.result = abandoned
	}
	return c.result
}

var _ device.Device = (*Device)(nil)

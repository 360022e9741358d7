// Package harness is the device that runs our MSL kernels on the CPU, so that the Metal
// backend and every kernel are tested on Linux. See README.md for how it works and what it
// does not model.
package harness

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redlite/batch/metalkit/device"
)

// Limits of the device, as an Apple GPU has them.
const (
	maxThreads = 1024
	simdWidth  = 32
	maxBytes   = 4096 // setBytes
	maxShared  = device.MaxThreadgroupMemory
)

// Options change the device's limits, so that tests can reach the backend's paths for small
// devices.
type Options struct {
	// MaxBufferLength is the largest buffer (MTLDevice.maxBufferLength); 0 means 4 GiB.
	MaxBufferLength int64
	// MemoryLimit is the most bytes all live buffers may hold; a NewBuffer beyond it fails
	// with device.ErrOutOfMemory. 0 means no limit but the machine's.
	MemoryLimit int64
}

const (
	opNew   = 1
	opWrite = 2
	opRead  = 3
	opFree  = 4
	opRun   = 5
)

// Device is the harness device: a child process built from the library and the runtime.
type Device struct {
	kernels map[string]int // host name → index in the runtime's table
	info    []kernel

	mu     sync.Mutex // one request at a time on the pipes
	cmd    *exec.Cmd
	w      *bufio.Writer
	r      *bufio.Reader
	stdin  io.Closer
	stderr *tail
	dead   error // set when the process died: every later call fails with it
	nextID uint32
	live   int64 // bytes held by live buffers
	opts   Options
}

var _ device.Device = (*Device)(nil)

// New builds (or takes from the cache) the harness executable for source, an MSL library
// (kernels.Source(), possibly with test kernels appended), and starts it. A source clang
// cannot compile gives an error with clang's messages.
func New(source string) (device.Device, error) {
	return newDevice(source, Options{})
}

// NewWithOptions is New with other limits.
func NewWithOptions(source string, opts Options) (device.Device, error) {
	return newDevice(source, opts)
}

func newDevice(source string, opts Options) (*Device, error) {
	if opts.MaxBufferLength <= 0 {
		opts.MaxBufferLength = 1 << 32
	}
	g, err := generate(source)
	if err != nil {
		return nil, err
	}
	exe, err := buildCached(context.Background(), g.Code)
	if err != nil {
		return nil, err
	}
	d := &Device{kernels: map[string]int{}, info: slices.Clone(g.Kernels), stderr: &tail{max: 64 << 10}, opts: opts}
	for i, k := range g.Kernels {
		d.kernels[k.Name] = i
	}
	d.cmd = exec.Command(exe)
	d.cmd.Env = append(os.Environ(), "ASAN_OPTIONS=")
	if sym := symbolizer(); sym != "" {
		d.cmd.Env = append(d.cmd.Env, "ASAN_SYMBOLIZER_PATH="+sym)
	}
	in, err := d.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness: starting %s: %w", exe, err)
	}
	d.stdin = in
	d.w = bufio.NewWriterSize(in, 1<<16)
	d.r = bufio.NewReaderSize(out, 1<<16)
	var hello [8]byte
	if _, err := io.ReadFull(d.r, hello[:]); err != nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		return nil, fmt.Errorf("harness: the process did not start: %v\n%s", err, d.stderr.String())
	}
	if binary.LittleEndian.Uint32(hello[:4]) != 0x4d534c48 || int(binary.LittleEndian.Uint32(hello[4:])) != len(g.Kernels) {
		d.Close()
		return nil, errors.New("harness: the process does not speak the protocol of this package")
	}
	static := make([]byte, 4*len(d.info))
	if _, err := io.ReadFull(d.r, static); err != nil {
		d.Close()
		return nil, fmt.Errorf("harness: the process did not list its kernels' threadgroup memory: %v", err)
	}
	for i := range d.info {
		d.info[i].StaticShared = int(binary.LittleEndian.Uint32(static[4*i:]))
	}
	return d, nil
}

func symbolizer() string {
	for _, p := range []string{"/usr/lib/llvm-16/bin/llvm-symbolizer", "/usr/bin/llvm-symbolizer-16"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func (d *Device) Name() string { return "harness (" + filepath.Base(Compiler()) + ", CPU)" }

func (d *Device) MaxBufferLength() int64 { return d.opts.MaxBufferLength }

// Kernels lists the library's kernel names, in the order of the source.
func (d *Device) Kernels() []string {
	names := make([]string, len(d.info))
	for i, k := range d.info {
		names[i] = k.Name
	}
	return names
}

// CheckThreadgroupMemory returns an error naming every kernel of the library whose own
// threadgroup variables exceed device.MaxThreadgroupMemory: a Metal library with one fails
// to make its pipeline on a GPU, whatever the dispatch sets.
func (d *Device) CheckThreadgroupMemory() error {
	var over []string
	for _, k := range d.info {
		if k.StaticShared > maxShared {
			over = append(over, fmt.Sprintf("%s declares %d bytes", k.Name, k.StaticShared))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("harness: threadgroup memory over %d bytes: %s", maxShared, strings.Join(over, "; "))
	}
	return nil
}

// Dead returns why the device can no longer run anything (its process died or it was
// closed), or nil.
func (d *Device) Dead() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

// Close stops the process. Buffers still held are freed with it.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return nil
	}
	d.stdin.Close()
	d.cmd.Wait()
	d.cmd = nil
	if d.dead == nil {
		d.dead = errors.New("device closed")
	}
	return nil
}

// ---------------------------------------------------------------- protocol

type protoErr struct {
	status   byte
	dispatch int
	msg      string
}

// roundTrip sends one request (already written by write) and reads the status; the caller
// holds d.mu. A broken pipe means the process died: the device is dead from then on.
func (d *Device) roundTrip(write func(w *bufio.Writer)) (*protoErr, error) {
	if d.dead != nil {
		return nil, fmt.Errorf("harness device is dead: %w", d.dead)
	}
	write(d.w)
	if err := d.w.Flush(); err != nil {
		return nil, d.died(err)
	}
	st, err := d.r.ReadByte()
	if err != nil {
		return nil, d.died(err)
	}
	if st == 0 {
		return nil, nil
	}
	var hdr [8]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		return nil, d.died(err)
	}
	msg := make([]byte, binary.LittleEndian.Uint32(hdr[4:]))
	if _, err := io.ReadFull(d.r, msg); err != nil {
		return nil, d.died(err)
	}
	return &protoErr{status: st, dispatch: int(binary.LittleEndian.Uint32(hdr[:4])), msg: string(msg)}, nil
}

var reDiedIn = regexp.MustCompile(`harness: (?:died running kernel|kernel) (\S+?)[: ]`)

// died waits for the process and keeps its last words (an AddressSanitizer report).
func (d *Device) died(cause error) error {
	d.stdin.Close()
	d.cmd.Wait()
	report := strings.TrimSpace(d.stderr.String())
	if report == "" {
		report = cause.Error()
	}
	d.dead = &crash{report: report}
	return d.dead
}

// crash is the harness process's death: its report, and the kernel it names.
type crash struct{ report string }

func (c *crash) Error() string { return "harness process died:\n" + c.report }

func (c *crash) kernel() string {
	if m := reDiedIn.FindStringSubmatch(c.report); m != nil {
		return m[1]
	}
	return ""
}

func put32(w *bufio.Writer, v uint32) { binary.Write(w, binary.LittleEndian, v) }
func put64(w *bufio.Writer, v uint64) { binary.Write(w, binary.LittleEndian, v) }

// ---------------------------------------------------------------- buffers

type buffer struct {
	d        *Device
	id       uint32
	n        int64
	released bool
}

func (d *Device) NewBuffer(size int64) (device.Buffer, error) {
	if size <= 0 || size > d.opts.MaxBufferLength {
		return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("size %d outside (0, %d]", size, d.opts.MaxBufferLength)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.MemoryLimit > 0 && d.live+size > d.opts.MemoryLimit {
		return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("%w: %d bytes on top of %d held, limit %d", device.ErrOutOfMemory, size, d.live, d.opts.MemoryLimit)}
	}
	d.nextID++
	id := d.nextID
	perr, err := d.roundTrip(func(w *bufio.Writer) {
		w.WriteByte(opNew)
		put32(w, id)
		put64(w, uint64(size))
	})
	if err != nil {
		return nil, &device.Error{Op: "new buffer", Err: err}
	}
	if perr != nil {
		if perr.status == 2 {
			return nil, &device.Error{Op: "new buffer", Err: fmt.Errorf("%w: %s", device.ErrOutOfMemory, perr.msg)}
		}
		return nil, &device.Error{Op: "new buffer", Err: errors.New(perr.msg)}
	}
	d.live += size
	return &buffer{d: d, id: id, n: size}, nil
}

// WrapBuffer copies data into a new buffer: the harness's memory is another process's.
func (d *Device) WrapBuffer(data []byte) (device.Buffer, error) {
	b, err := d.NewBuffer(int64(len(data)))
	if err != nil {
		return nil, err
	}
	if err := b.Write(0, data); err != nil {
		b.Release()
		return nil, err
	}
	return b, nil
}

func (b *buffer) Len() int64 { return b.n }

func (b *buffer) check(op string, off int64, n int) error {
	if b.released {
		return &device.Error{Op: op, Err: errors.New("buffer released")}
	}
	if off < 0 || off+int64(n) > b.n {
		return &device.Error{Op: op, Err: fmt.Errorf("[%d, %d) outside a buffer of %d bytes", off, off+int64(n), b.n)}
	}
	return nil
}

func (b *buffer) Write(off int64, src []byte) error {
	return b.transfer("write", opWrite, off, src, nil)
}

func (b *buffer) Read(off int64, dst []byte) error { return b.transfer("read", opRead, off, nil, dst) }

// transfer writes src to, or reads dst from, the buffer at off.
func (b *buffer) transfer(name string, op byte, off int64, src, dst []byte) error {
	n := len(src) + len(dst)
	if err := b.check(name, off, n); err != nil {
		return err
	}
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	perr, err := b.d.roundTrip(func(w *bufio.Writer) {
		w.WriteByte(op)
		put32(w, b.id)
		put64(w, uint64(off))
		put64(w, uint64(n))
		w.Write(src)
	})
	if err == nil && perr != nil {
		err = errors.New(perr.msg)
	}
	if err == nil && dst != nil {
		if _, rerr := io.ReadFull(b.d.r, dst); rerr != nil {
			err = b.d.died(rerr)
		}
	}
	if err != nil {
		return &device.Error{Op: name, Err: err}
	}
	return nil
}

func (b *buffer) Release() {
	if b.released {
		return
	}
	b.released = true
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	b.d.live -= b.n
	if b.d.dead != nil {
		return
	}
	b.d.roundTrip(func(w *bufio.Writer) {
		w.WriteByte(opFree)
		put32(w, b.id)
	})
}

// ---------------------------------------------------------------- pipelines

type pipeline struct {
	d      *Device
	index  int
	k      *kernel
	consts []device.Constant
}

func (p *pipeline) Name() string    { return p.k.Name }
func (p *pipeline) MaxThreads() int { return maxThreads }
func (p *pipeline) SIMDWidth() int  { return simdWidth }

// StaticShared is the sum of the kernel's threadgroup variables, as the process computed it.
func (p *pipeline) StaticShared() int { return p.k.StaticShared }

// Pipeline finds the kernel; nothing is compiled per pipeline: function constants are set
// per dispatch (see README.md).
func (d *Device) Pipeline(name string, consts ...device.Constant) (device.Pipeline, error) {
	i, ok := d.kernels[name]
	if !ok {
		return nil, &device.Error{Op: "pipeline " + name, Kernel: name, Err: errors.New("no kernel of that name in the library")}
	}
	for _, c := range consts {
		if _, _, err := constantBits(c); err != nil {
			return nil, &device.Error{Op: "pipeline " + name, Kernel: name, Err: err}
		}
	}
	return &pipeline{d: d, index: i, k: &d.info[i], consts: append([]device.Constant(nil), consts...)}, nil
}

func constantBits(c device.Constant) (byte, uint32, error) {
	if c.Index < 0 || c.Index > 65535 {
		return 0, 0, fmt.Errorf("function constant index %d out of range", c.Index)
	}
	switch v := c.Value.(type) {
	case bool:
		if v {
			return 1, 1, nil
		}
		return 1, 0, nil
	case int32:
		return 2, uint32(v), nil
	case uint32:
		return 3, v, nil
	case float32:
		return 4, math.Float32bits(v), nil
	}
	return 0, 0, fmt.Errorf("function constant %d: value of type %T (want bool, int32, uint32 or float32)", c.Index, c.Value)
}

// ---------------------------------------------------------------- commands

type commands struct {
	d         *Device
	list      []device.Dispatch
	err       error
	committed bool
	done      chan struct{}
	result    error
}

func (d *Device) NewCommands() device.Commands { return &commands{d: d} }

func (c *commands) Encode(dd device.Dispatch) {
	if c.err != nil {
		return
	}
	if c.committed {
		c.err = &device.Error{Op: "encode", Err: errors.New("encoding after Commit")}
		return
	}
	if err := c.d.validate(&dd); err != nil {
		c.err = err
		return
	}
	dd.Buffers = append([]device.BufferArg(nil), dd.Buffers...)
	dd.Bytes = append([]device.BytesArg(nil), dd.Bytes...)
	for i := range dd.Bytes {
		dd.Bytes[i].Data = append([]byte(nil), dd.Bytes[i].Data...) // setBytes copies now
	}
	dd.Shared = append([]device.SharedArg(nil), dd.Shared...)
	c.list = append(c.list, dd)
}

// validate checks a dispatch as Metal's validation layer would, naming the kernel.
func (d *Device) validate(dd *device.Dispatch) error {
	p, ok := dd.Pipeline.(*pipeline)
	if !ok || p.d != d {
		return &device.Error{Op: "encode", Err: errors.New("pipeline of another device")}
	}
	fail := func(format string, args ...any) error {
		return &device.Error{Op: "encode", Kernel: p.k.Name, Err: fmt.Errorf(format, args...)}
	}
	n := 1
	for i := 0; i < 3; i++ {
		if dd.Groups[i] <= 0 || dd.Threads[i] <= 0 {
			return fail("groups %v and threads %v must be positive", dd.Groups, dd.Threads)
		}
		if dd.Groups[i] > math.MaxUint32/dd.Threads[i] {
			return fail("grid %v × %v too large", dd.Groups, dd.Threads)
		}
		n *= dd.Threads[i]
	}
	if n > maxThreads {
		return fail("%d threads per threadgroup, at most %d", n, maxThreads)
	}
	bound := map[int]string{}
	bind := func(i int, what string) error {
		if i < 0 || i >= 31 {
			return fail("%s index %d outside [0, 31)", what, i)
		}
		if prev, ok := bound[i]; ok {
			return fail("index %d bound twice (%s and %s)", i, prev, what)
		}
		bound[i] = what
		return nil
	}
	for _, b := range dd.Buffers {
		if err := bind(b.Index, "buffer"); err != nil {
			return err
		}
		hb, ok := b.Buffer.(*buffer)
		if !ok || hb.d != d {
			return fail("buffer(%d) is not a buffer of this device", b.Index)
		}
		if hb.released {
			return fail("buffer(%d) was released", b.Index)
		}
		if b.Offset < 0 || b.Offset > hb.n {
			return fail("buffer(%d) offset %d outside a buffer of %d bytes", b.Index, b.Offset, hb.n)
		}
		if b.Length < 0 || b.Offset+b.Length > hb.n {
			return fail("buffer(%d) region [%d, +%d) outside a buffer of %d bytes", b.Index, b.Offset, b.Length, hb.n)
		}
	}
	for _, b := range dd.Bytes {
		if err := bind(b.Index, "bytes"); err != nil {
			return err
		}
		if len(b.Data) > maxBytes {
			return fail("bytes(%d) of %d bytes, at most %d", b.Index, len(b.Data), maxBytes)
		}
	}
	for _, i := range p.k.Buffers {
		if _, ok := bound[i]; !ok {
			return fail("buffer(%d) not bound", i)
		}
	}
	shared := map[int]int{}
	total := p.k.StaticShared
	for _, s := range dd.Shared {
		if s.Index < 0 || s.Index >= 31 {
			return fail("threadgroup memory index %d outside [0, 31)", s.Index)
		}
		if s.Size <= 0 || s.Size%16 != 0 {
			return fail("threadgroup(%d) memory of %d bytes: Metal wants a positive multiple of 16", s.Index, s.Size)
		}
		shared[s.Index] = s.Size
		total += s.Size
	}
	if total > maxShared {
		return fail("%d bytes of threadgroup memory (%d declared by the kernel, %d set), at most %d", total, p.k.StaticShared, total-p.k.StaticShared, maxShared)
	}
	for _, i := range p.k.Shared {
		if _, ok := shared[i]; !ok {
			return fail("threadgroup(%d) memory not set", i)
		}
	}
	return nil
}

func (c *commands) Commit() {
	if c.committed {
		return
	}
	c.committed = true
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		if c.err != nil {
			c.result = c.err
			return
		}
		c.result = c.d.run(c.list)
	}()
}

func (c *commands) Wait() error {
	if !c.committed {
		return &device.Error{Op: "wait", Err: errors.New("Wait before Commit")}
	}
	<-c.done
	return c.result
}

func (d *Device) run(list []device.Dispatch) error {
	if len(list) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var expired atomic.Bool
	limit := commandTimeout()
	if d.dead == nil && d.cmd != nil {
		// A kernel that never finishes would hang the test binary: abort the process, whose
		// report then names the kernel it was running.
		proc := d.cmd.Process
		timer := time.AfterFunc(limit, func() {
			expired.Store(true)
			proc.Signal(syscall.SIGABRT)
		})
		defer timer.Stop()
	}
	perr, err := d.roundTrip(func(w *bufio.Writer) {
		w.WriteByte(opRun)
		put32(w, uint32(len(list)))
		for _, dd := range list {
			p := dd.Pipeline.(*pipeline)
			put32(w, uint32(p.index))
			for i := 0; i < 3; i++ {
				put32(w, uint32(dd.Groups[i]))
			}
			for i := 0; i < 3; i++ {
				put32(w, uint32(dd.Threads[i]))
			}
			put32(w, uint32(len(p.consts)))
			for _, k := range p.consts {
				t, bits, _ := constantBits(k)
				put32(w, uint32(k.Index))
				w.WriteByte(t)
				put32(w, bits)
			}
			put32(w, uint32(len(dd.Buffers)))
			for _, b := range dd.Buffers {
				put32(w, uint32(b.Index))
				put32(w, b.Buffer.(*buffer).id)
				put64(w, uint64(b.Offset))
				put64(w, uint64(b.Length))
			}
			put32(w, uint32(len(dd.Bytes)))
			for _, b := range dd.Bytes {
				put32(w, uint32(b.Index))
				put32(w, uint32(len(b.Data)))
				w.Write(b.Data)
			}
			put32(w, uint32(len(dd.Shared)))
			for _, s := range dd.Shared {
				put32(w, uint32(s.Index))
				put32(w, uint32(s.Size))
			}
		}
	})
	if err != nil {
		var cr *crash
		kernel := ""
		if errors.As(err, &cr) {
			kernel = cr.kernel()
		}
		if expired.Load() {
			err = fmt.Errorf("aborted after running for %v (harness.Timeout, $REDLITE_HARNESS_TIMEOUT): %w", limit, err)
		}
		return &device.Error{Op: "commit", Kernel: kernel, Err: err}
	}
	if perr != nil {
		kernel := ""
		if perr.dispatch < len(list) {
			kernel = list[perr.dispatch].Pipeline.Name()
		}
		return &device.Error{Op: "commit", Kernel: kernel, Err: fmt.Errorf("dispatch %d: %s", perr.dispatch, perr.msg)}
	}
	return nil
}

// Timeout is how long a command list may run before the harness aborts it as hung (a kernel
// looping forever); $REDLITE_HARNESS_TIMEOUT (a Go duration) overrides it.
var Timeout = 2 * time.Minute

func commandTimeout() time.Duration {
	if v := os.Getenv("REDLITE_HARNESS_TIMEOUT"); v != "" {
		if t, err := time.ParseDuration(v); err == nil && t > 0 {
			return t
		}
	}
	return Timeout
}

// tail keeps the last max bytes written to it (the process's stderr).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

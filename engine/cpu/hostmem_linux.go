package cpu

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// hostLive is the bytes of every hostBytes mapping not yet unmapped, hostAtGC what it was
// after the last collection hostBytes asked for.
var hostLive, hostAtGC atomic.Int64

// hostGCBytes is the mapped bytes hostBytes lets accumulate before it collects: the
// collector does not see mappings, so weights dropped by a process that loads model after
// model (tests, a worker changing models) would keep theirs until the heap alone called
// for a collection.
const hostGCBytes = 1 << 30

// hostMapMin is the least layout hostBytes maps: at most 1/8 of a mapping is rounding.
const hostMapMin = 16 << 20

// hostBytes returns n zeroed bytes for a weight's repacked layout, and whether they are
// outside the Go heap: in an anonymous mapping
// advised for 2 MiB pages (MADV_HUGEPAGE) before anything touches it, which owner's cleanup
// unmaps. The mapped GGUF is read through the page cache's large folios; the repacked rows,
// streamed as often, missed the TLB on 4 KiB pages, and qwen3next-mini Q8_0 decoded 1.3–1.5×
// slower from them (docs/benchmarks.md). Go heap advised the same way measured in between
// (the allocator may touch it first, and then the pages are 4 KiB until khugepaged merges
// them). Layouts under hostMapMin come from the heap: a mapping is whole 2 MiB pages.
func hostBytes[T any](owner *T, n int) (b []byte, mapped bool) {
	const huge = 2 << 20
	if n < hostMapMin {
		return make([]byte, n), false
	}
	size := (n + huge - 1) / huge * huge
	if hostLive.Load()-hostAtGC.Load() > hostGCBytes {
		runtime.GC()
		hostAtGC.Store(hostLive.Load())
	}
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]byte, n), false
	}
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; where refused, 4 KiB pages
	hostLive.Add(int64(size))
	runtime.AddCleanup(owner, func(b []byte) {
		if syscall.Munmap(b) == nil {
			hostLive.Add(-int64(len(b)))
		}
	}, b)
	return b[:n:n], true
}

// dropHostBytes gives the memory of b, a mapped layout of hostBytes, back to the system at
// once; b reads as zeros afterwards, so nothing may read it again. (Its mapping goes with
// its owner.)
func dropHostBytes(b []byte) {
	if len(b) == 0 {
		return
	}
	_ = syscall.Madvise(b[:cap(b)], syscall.MADV_DONTNEED)
}

// physicalMemory is the machine's RAM in bytes (0 if unknown).
func physicalMemory() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

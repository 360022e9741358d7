// runtime.cpp: the harness process. It holds the device's buffers (one malloc each, so that
// AddressSanitizer's redzones guard every buffer's end), reads requests from the Go side on
// stdin, and runs dispatches: every threadgroup's threads are fibers switched cooperatively
// on one OS thread, so threadgroup barriers and SIMD-group operations truly synchronise;
// threadgroups are spread over a few OS threads.
//
// Protocol (little-endian, one response per request):
//   request  = u8 op, fields…
//   response = u8 status (0 ok, 1 error, 2 out of memory), then on error u32 dispatch, u32 n,
//              n bytes of message; READ's data follows an ok status.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness_abi.h"

// MSL_ASAN: the executable links AddressSanitizer (the runtime itself is compiled without
// instrumentation, so __has_feature cannot tell).
#if defined(__has_feature) && !defined(MSL_ASAN)
#if __has_feature(address_sanitizer)
#define MSL_ASAN 1
#endif
#endif
#ifdef MSL_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
extern "C" const char *__asan_default_options() {
	// Fibers are annotated, but fake stacks (use-after-return) and leak checking only cost
	// time here; a report must kill the process so that the Go side sees it.
	return "detect_stack_use_after_return=0:detect_leaks=0:allocator_may_return_null=1:handle_abort=1:abort_on_error=0";
}
#endif

enum { OP_NEW = 1, OP_WRITE = 2, OP_READ = 3, OP_FREE = 4, OP_RUN = 5, OP_PING = 6 };
enum { ST_OK = 0, ST_ERR = 1, ST_OOM = 2 };

static const int MAX_THREADS = 1024;          // threads per threadgroup (Apple GPUs)
static const size_t STACK_SIZE = 256 << 10;   // per fiber; ASan frames are large
static const size_t MAX_SHARED = MSL_MAX_SHARED; // threadgroup memory per threadgroup (device.MaxThreadgroupMemory)

// ---------------------------------------------------------------- fibers
// Our own context switch: swapcontext makes a sigprocmask syscall per switch.
extern "C" void __msl_switch(void **save_sp, void *to_sp);
extern "C" void __msl_trampoline();
#if defined(__x86_64__)
asm(R"(
.text
.globl __msl_switch
.type __msl_switch,@function
__msl_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
.size __msl_switch,.-__msl_switch
.globl __msl_trampoline
.type __msl_trampoline,@function
__msl_trampoline:
	movq %r12, %rdi
	callq *%r13
	ud2
.size __msl_trampoline,.-__msl_trampoline
)");
// The frame __msl_switch pops on a fresh stack: r15..rbp, return address. MXCSR and the
// x87 control word are not switched: no kernel changes them, and every fiber shares them.
static void *fiber_init(char *stack, size_t size, void (*fn)(void *), void *arg) {
	uintptr_t top = ((uintptr_t)(stack + size) & ~(uintptr_t)15) - 16;
	uint64_t *sp = (uint64_t *)(top - 56); // the trampoline starts 16-aligned, as after a call
	sp[0] = 0;                           // r15
	sp[1] = 0;                           // r14
	sp[2] = (uint64_t)fn;                // r13
	sp[3] = (uint64_t)arg;               // r12
	sp[4] = 0;                           // rbx
	sp[5] = 0;                           // rbp
	sp[6] = (uint64_t)&__msl_trampoline; // return address
	return sp;
}
#elif defined(__aarch64__)
asm(R"(
.text
.globl __msl_switch
.type __msl_switch,%function
__msl_switch:
	sub sp, sp, #176
	stp x19, x20, [sp, #0]
	stp x21, x22, [sp, #16]
	stp x23, x24, [sp, #32]
	stp x25, x26, [sp, #48]
	stp x27, x28, [sp, #64]
	stp x29, x30, [sp, #80]
	stp d8, d9, [sp, #96]
	stp d10, d11, [sp, #112]
	stp d12, d13, [sp, #128]
	stp d14, d15, [sp, #144]
	mov x2, sp
	str x2, [x0]
	mov sp, x1
	ldp x19, x20, [sp, #0]
	ldp x21, x22, [sp, #16]
	ldp x23, x24, [sp, #32]
	ldp x25, x26, [sp, #48]
	ldp x27, x28, [sp, #64]
	ldp x29, x30, [sp, #80]
	ldp d8, d9, [sp, #96]
	ldp d10, d11, [sp, #112]
	ldp d12, d13, [sp, #128]
	ldp d14, d15, [sp, #144]
	add sp, sp, #176
	ret
.size __msl_switch,.-__msl_switch
.globl __msl_trampoline
.type __msl_trampoline,%function
__msl_trampoline:
	mov x0, x19
	blr x20
	brk #0
.size __msl_trampoline,.-__msl_trampoline
)");
static void *fiber_init(char *stack, size_t size, void (*fn)(void *), void *arg) {
	uintptr_t top = ((uintptr_t)(stack + size) & ~(uintptr_t)15) - 16;
	uint64_t *sp = (uint64_t *)(top - 176);
	memset(sp, 0, 176);
	sp[0] = (uint64_t)arg;               // x19
	sp[1] = (uint64_t)fn;                // x20
	sp[11] = (uint64_t)&__msl_trampoline; // x30
	return sp;
}
#else
#error "harness runtime: no context switch for this architecture"
#endif

// ---------------------------------------------------------------- state
struct Buffer {
	char *p;
	uint64_t n;
};
static std::unordered_map<uint32_t, Buffer> buffers;

struct FC {
	int index;
	void *var;
	int type;
	bool *defined;
};
static std::vector<FC> &fcs() {
	static std::vector<FC> v;
	return v;
}
extern "C" int __msl_fc_register(int index, void *var, int type, bool *defined) {
	fcs().push_back({index, var, type, defined});
	return 0;
}

enum LaneState { RUNNABLE, AT_BARRIER, AT_SIMD, DONE, FAILED };

struct Worker;
struct Lane {
	void *sp;
	char *stack;
	Worker *w;
	__msl_ctx ctx;
	LaneState state;
	// where the lane waits
	__msl_slot *slot;
	__msl_simd_fn fn;
	const char *op, *file;
	uint32_t line, col;
	void *fake;
};

struct Dispatch {
	const __msl_kernel_desc *k;
	uint32_t groups[3], threads[3];
	void *buf[MSL_MAX_BINDINGS];
	uint32_t shared[MSL_MAX_BINDINGS]; // [[threadgroup(n)]] sizes, 0 = unbound
};

struct Worker {
	std::vector<Lane> lanes;
	char *stacks = nullptr;
	void *sched_sp = nullptr;
	const void *sched_bottom = nullptr;
	size_t sched_size = 0;
	void *sched_fake = nullptr;
	bool dirty = false; // an abandoned threadgroup left poisoned frames on the stacks
	// the running threadgroup
	const Dispatch *d = nullptr;
	std::vector<std::pair<const void *, void *>> tgvars;
	size_t tgbytes = 0;
	std::string fail; // set by __msl_fail in a lane
	std::string err;
};

static thread_local Worker *cur_worker;
static thread_local Lane *cur_lane;

static const char *running_kernel = "";
static std::atomic<int> running_dispatch{-1};

static void death_callback() {
	fprintf(stderr, "\nharness: died running kernel %s (dispatch %d)\n", running_kernel, running_dispatch.load());
	fprintf(stderr, "harness: (use-after-poison: an access inside a buffer but outside the regions bound to the dispatch)\n");
}


// ---------------------------------------------------------------- switching
static void switch_to_lane(Worker *w, Lane *l) {
	cur_lane = l;
#ifdef MSL_ASAN
	__sanitizer_start_switch_fiber(&w->sched_fake, l->stack, STACK_SIZE);
#endif
	__msl_switch(&w->sched_sp, l->sp);
#ifdef MSL_ASAN
	__sanitizer_finish_switch_fiber(w->sched_fake, nullptr, nullptr);
#endif
	cur_lane = nullptr;
}

static void yield_to_scheduler(Lane *l, bool dying) {
	Worker *w = l->w;
#ifdef MSL_ASAN
	__sanitizer_start_switch_fiber(dying ? nullptr : &l->fake, w->sched_bottom, w->sched_size);
#endif
	__msl_switch(&l->sp, w->sched_sp);
#ifdef MSL_ASAN
	__sanitizer_finish_switch_fiber(l->fake, &w->sched_bottom, &w->sched_size);
#endif
}

static void lane_main(void *arg) {
	Lane *l = (Lane *)arg;
#ifdef MSL_ASAN
	__sanitizer_finish_switch_fiber(nullptr, &l->w->sched_bottom, &l->w->sched_size);
#endif
	l->w->d->k->fn(&l->ctx);
	l->state = DONE;
	yield_to_scheduler(l, true);
	__builtin_trap();
}

// __msl_fail stops the calling thread's threadgroup with an error (the dispatch fails, the
// process lives on); outside a kernel it aborts.
extern "C" void __msl_fail(const char *msg) {
	Lane *l = cur_lane;
	if (!l) {
		fprintf(stderr, "\nharness: kernel %s: %s\n", running_kernel, msg);
		abort();
	}
	if (l->w->fail.empty()) l->w->fail = "thread " + std::to_string(l->ctx.tiitg) + ": " + msg;
	l->state = FAILED;
	yield_to_scheduler(l, true);
	__builtin_trap();
}

extern "C" void __msl_barrier(const char *op, const char *file, uint32_t line, uint32_t col) {
	Lane *l = cur_lane;
	l->state = AT_BARRIER;
	l->op = op, l->file = file, l->line = line, l->col = col;
	yield_to_scheduler(l, false);
}

extern "C" void __msl_simd_sync(__msl_slot *s, __msl_simd_fn fn, const char *op, const char *file, uint32_t line, uint32_t col) {
	Lane *l = cur_lane;
	l->state = AT_SIMD;
	l->slot = s, l->fn = fn;
	l->op = op, l->file = file, l->line = line, l->col = col;
	yield_to_scheduler(l, false);
}

extern "C" void *__msl_tg_alloc(const void *key, size_t size, size_t align) {
	// The kernel's declarations were counted before its first thread ran (run_group).
	Worker *w = cur_worker;
	for (auto &kv : w->tgvars)
		if (kv.first == key) return kv.second;
	void *p = align > 16 ? aligned_alloc(align, (size + align - 1) / align * align) : malloc(size ? size : 1);
	memset(p, 0xFF, size); // uninitialised threadgroup memory reads as NaN
	w->tgvars.push_back({key, p});
	return p;
}

// ---------------------------------------------------------------- threadgroups
static std::string where(const Lane &l) {
	char b[512];
	snprintf(b, sizeof b, "%s at %s:%u:%u", l.op, l.file, l.line, l.col);
	return b;
}

// run_group runs one threadgroup to completion; it returns false with w->err set when the
// threads cannot all proceed (divergent barriers or SIMD operations).
static bool run_group(Worker *w, const Dispatch &d, const uint32_t g[3]) {
	const uint32_t tx = d.threads[0], ty = d.threads[1], tz = d.threads[2];
	const uint32_t T = tx * ty * tz;
	void *tgp[MSL_MAX_BINDINGS] = {};
	w->d = &d;
	w->tgbytes = d.k->static_tg;
	for (int i = 0; i < MSL_MAX_BINDINGS; i++)
		if (d.shared[i]) {
			w->tgbytes += d.shared[i];
			tgp[i] = malloc(d.shared[i]);
			memset(tgp[i], 0xFF, d.shared[i]);
		}
	bool ok = true;
	if (w->tgbytes > MAX_SHARED) {
		w->err = "threadgroup memory of " + std::to_string(w->tgbytes) + " bytes (" + std::to_string(d.k->static_tg) +
			 " declared by the kernel) exceeds " + std::to_string(MAX_SHARED);
		ok = false;
	}
#ifdef MSL_ASAN
	if (w->dirty) {
		__asan_unpoison_memory_region(w->stacks, STACK_SIZE * MAX_THREADS);
		w->dirty = false;
	}
#endif
	for (uint32_t i = 0; ok && i < T; i++) {
		Lane &l = w->lanes[i];
		l.w = w;
		l.state = RUNNABLE;
		l.fake = nullptr;
		__msl_ctx &c = l.ctx;
		c.buf = d.buf;
		c.tg = tgp;
		c.tpitg[0] = i % tx, c.tpitg[1] = (i / tx) % ty, c.tpitg[2] = i / (tx * ty);
		for (int k = 0; k < 3; k++) {
			c.tgpig[k] = g[k];
			c.tptg[k] = d.threads[k];
			c.tgpg[k] = d.groups[k];
			c.tpgrid[k] = d.groups[k] * d.threads[k];
			c.tpig[k] = g[k] * d.threads[k] + c.tpitg[k];
		}
		c.tiitg = i, c.sgitg = i / 32, c.tiisg = i % 32, c.sgptg = (T + 31) / 32, c.tpsg = 32;
		l.sp = fiber_init(l.stack, STACK_SIZE, lane_main, &l);
	}
	const uint32_t nsg = (T + 31) / 32;
	// Lanes run in increasing order in even rounds of even threadgroups and decreasing order
	// otherwise, so that a read of another thread's threadgroup memory without a barrier
	// sees the unwritten value in one direction or the other.
	uint32_t round = g[0] + g[1] + g[2];
	while (ok) {
		if (round++ & 1) {
			for (uint32_t i = T; i-- > 0;)
				if (w->lanes[i].state == RUNNABLE) switch_to_lane(w, &w->lanes[i]);
		} else {
			for (uint32_t i = 0; i < T; i++)
				if (w->lanes[i].state == RUNNABLE) switch_to_lane(w, &w->lanes[i]);
		}
		// Every lane is now finished, failed or waiting.
		if (!w->fail.empty()) {
			w->err = w->fail;
			w->fail.clear();
			ok = false;
			break;
		}
		bool moved = false;
		for (uint32_t s = 0; ok && s < nsg; s++) {
			__msl_slot *L[32] = {};
			Lane *first = nullptr;
			for (uint32_t j = 0; j < 32 && s * 32 + j < T; j++) {
				Lane &l = w->lanes[s * 32 + j];
				if (l.state != AT_SIMD) continue;
				if (!first) {
					first = &l;
				} else if (l.fn != first->fn || l.line != first->line || l.col != first->col || l.file != first->file) {
					w->err = "SIMD group " + std::to_string(s) + " diverged: lane " + std::to_string(first - &w->lanes[s * 32]) +
						 " waits at " + where(*first) + ", lane " + std::to_string(j) + " at " + where(l);
					ok = false;
					break;
				}
				L[j] = l.slot;
			}
			if (!ok || !first) continue;
			first->fn(L);
			for (uint32_t j = 0; j < 32 && s * 32 + j < T; j++)
				if (L[j]) w->lanes[s * 32 + j].state = RUNNABLE;
			moved = true;
		}
		if (!ok || moved) continue;
		uint32_t done = 0, waiting = 0;
		Lane *b = nullptr;
		for (uint32_t i = 0; i < T; i++) {
			Lane &l = w->lanes[i];
			if (l.state == DONE) {
				done++;
			} else {
				waiting++;
				if (!b) {
					b = &l;
				} else if (l.line != b->line || l.col != b->col || l.file != b->file) {
					w->err = "threads of a threadgroup wait at different barriers: thread " + std::to_string(b - &w->lanes[0]) +
						 " at " + where(*b) + ", thread " + std::to_string(i) + " at " + where(l);
					ok = false;
					break;
				}
			}
		}
		if (!ok) break;
		if (waiting == 0) break;
		if (done > 0) {
			w->err = std::to_string(waiting) + " of " + std::to_string(T) + " threads wait at " + where(*b) + " that the other " +
				 std::to_string(done) + " returned without reaching";
			ok = false;
			break;
		}
		for (uint32_t i = 0; i < T; i++) w->lanes[i].state = RUNNABLE;
	}
	if (!ok) w->dirty = true;
	for (int i = 0; i < MSL_MAX_BINDINGS; i++) free(tgp[i]);
	for (auto &kv : w->tgvars) free(kv.second);
	w->tgvars.clear();
	return ok;
}

static Worker *new_worker() {
	Worker *w = new Worker;
	size_t total = STACK_SIZE * MAX_THREADS;
	w->stacks = (char *)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (w->stacks == MAP_FAILED) {
		perror("harness: mmap fiber stacks");
		exit(3);
	}
	w->lanes.resize(MAX_THREADS);
	long page = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < MAX_THREADS; i++) {
		w->lanes[i].stack = w->stacks + i * STACK_SIZE;
		mprotect(w->lanes[i].stack, page, PROT_NONE); // guard page: an overflow faults
	}
	return w;
}

// ---------------------------------------------------------------- worker pool
struct Pool {
	std::vector<Worker *> workers;
	std::vector<std::thread> threads;
	std::mutex mu;
	std::condition_variable cv, done_cv;
	const Dispatch *d = nullptr;
	uint64_t gen = 0;
	int busy = 0;
	std::atomic<uint64_t> next{0};
	uint64_t total = 0;
	std::atomic<bool> failed{false};
	std::string err;

	void work(Worker *w) {
		cur_worker = w;
		const Dispatch &dd = *d;
		for (;;) {
			if (failed.load()) return;
			uint64_t i = next.fetch_add(1);
			if (i >= total) return;
			uint32_t g[3];
			g[0] = i % dd.groups[0];
			g[1] = (i / dd.groups[0]) % dd.groups[1];
			g[2] = i / (uint64_t(dd.groups[0]) * dd.groups[1]);
			if (!run_group(w, dd, g)) {
				std::lock_guard<std::mutex> lk(mu);
				if (!failed.exchange(true))
					err = "threadgroup (" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) + "): " + w->err;
				return;
			}
		}
	}
	void helper(Worker *w) {
		uint64_t seen = 0;
		for (;;) {
			{
				std::unique_lock<std::mutex> lk(mu);
				cv.wait(lk, [&] { return gen != seen; });
				seen = gen;
			}
			work(w);
			std::lock_guard<std::mutex> lk(mu);
			if (--busy == 0) done_cv.notify_all();
		}
	}
	void start(int n) {
		for (int i = 0; i < n; i++) workers.push_back(new_worker());
		for (int i = 1; i < n; i++) threads.emplace_back([this, i] { helper(workers[i]); });
	}
	// run executes d on every worker; it returns the first error or "".
	std::string run(const Dispatch &dd) {
		total = uint64_t(dd.groups[0]) * dd.groups[1] * dd.groups[2];
		next = 0;
		failed = false;
		err.clear();
		d = &dd;
		int helpers = total > 1 ? (int)threads.size() : 0;
		if (helpers) {
			std::lock_guard<std::mutex> lk(mu);
			busy = (int)threads.size();
			gen++;
			cv.notify_all();
		}
		work(workers[0]);
		if (helpers) {
			std::unique_lock<std::mutex> lk(mu);
			done_cv.wait(lk, [&] { return busy == 0; });
		}
		return err;
	}
};
static Pool pool;

// ---------------------------------------------------------------- protocol
static void rd(void *p, size_t n) {
	if (n && fread(p, 1, n, stdin) != n) _exit(0); // the Go side closed the pipe: quit
}
template <class T> static T rd() {
	T v;
	rd(&v, sizeof v);
	return v;
}
static void wr(const void *p, size_t n) {
	if (n && fwrite(p, 1, n, stdout) != n) _exit(0);
}
template <class T> static void wr(T v) { wr(&v, sizeof v); }
static void reply_ok() {
	wr<uint8_t>(ST_OK);
	fflush(stdout);
}
static void reply_err(uint8_t st, uint32_t dispatch, const std::string &msg) {
	wr<uint8_t>(st);
	wr<uint32_t>(dispatch);
	wr<uint32_t>((uint32_t)msg.size());
	wr(msg.data(), msg.size());
	fflush(stdout);
}

static void set_constants(const std::vector<std::pair<uint32_t, std::pair<uint8_t, uint32_t>>> &given) {
	static const int size[] = {0, 1, 4, 4, 4, 2, 2, 2, 1, 1};
	for (auto &fc : fcs()) {
		*fc.defined = false;
		memset(fc.var, 0, size[fc.type]); // an undefined constant reads as zero
		for (auto &g : given) {
			if ((int)g.first != fc.index) continue;
			*fc.defined = true;
			uint8_t t = g.second.first;
			uint32_t bits = g.second.second;
			double v;
			if (t == MSL_FC_FLOAT) {
				float f;
				memcpy(&f, &bits, 4);
				v = f;
			} else if (t == MSL_FC_INT) {
				v = (int32_t)bits;
			} else {
				v = bits;
			}
			switch (fc.type) {
			case MSL_FC_BOOL: *(bool *)fc.var = v != 0; break;
			case MSL_FC_INT: *(int32_t *)fc.var = (int32_t)v; break;
			case MSL_FC_UINT: *(uint32_t *)fc.var = (uint32_t)v; break;
			case MSL_FC_FLOAT: *(float *)fc.var = (float)v; break;
			case MSL_FC_HALF: *(_Float16 *)fc.var = (_Float16)v; break;
			case MSL_FC_SHORT: *(int16_t *)fc.var = (int16_t)v; break;
			case MSL_FC_USHORT: *(uint16_t *)fc.var = (uint16_t)v; break;
			case MSL_FC_CHAR: *(int8_t *)fc.var = (int8_t)v; break;
			case MSL_FC_UCHAR: *(uint8_t *)fc.var = (uint8_t)v; break;
			}
		}
	}
}

// fence makes the bytes of the dispatch's buffers outside its bound regions unaddressable
// (on) or addressable again (off): a kernel that runs past its tensor into the next one in
// the same buffer gets a use-after-poison report. Buffers above FENCE_MAX are left alone:
// poisoning costs an eighth of the buffer's size in shadow writes per dispatch.
static const uint64_t FENCE_MAX = 256ull << 20;
static void fence(const std::vector<std::pair<Buffer, std::pair<uint64_t, uint64_t>>> &regions, bool on) {
#ifdef MSL_ASAN
	for (auto &r : regions)
		if (r.first.n <= FENCE_MAX) {
			if (on)
				__asan_poison_memory_region(r.first.p, r.first.n);
			else
				__asan_unpoison_memory_region(r.first.p, r.first.n);
		}
	if (on)
		for (auto &r : regions)
			if (r.first.n <= FENCE_MAX) __asan_unpoison_memory_region(r.first.p + r.second.first, r.second.second);
#endif
}

// Profile: with $REDLITE_HARNESS_PROFILE set to a file, the time spent in each kernel (and
// its dispatch and thread counts) is written there when the process ends.
struct KernelProfile {
	uint64_t ns = 0, cpu = 0, dispatches = 0, threads = 0;
};
static std::vector<KernelProfile> profile;
static const char *profile_path;

static uint64_t now_ns(clockid_t clock = CLOCK_MONOTONIC) {
	timespec ts;
	clock_gettime(clock, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

static void write_profile() {
	if (!profile_path) return;
	FILE *f = fopen(profile_path, "a");
	if (!f) return;
	std::vector<int> order;
	uint64_t total = 0;
	for (int i = 0; i < (int)profile.size(); i++)
		if (profile[i].dispatches) order.push_back(i), total += profile[i].ns;
	std::sort(order.begin(), order.end(), [](int a, int b) { return profile[a].ns > profile[b].ns; });
	// cpu ms is the process's CPU time (all workers), steadier than the wall time on a
	// loaded machine.
	fprintf(f, "%-32s %10s %10s %6s %10s %12s %13s\n", "kernel", "ms", "cpu ms", "%", "dispatches", "threads", "cpu ns/thread");
	for (int i : order) {
		const KernelProfile &p = profile[i];
		fprintf(f, "%-32s %10.1f %10.1f %6.1f %10llu %12llu %13.0f\n", __msl_kernels[i].name, p.ns / 1e6, p.cpu / 1e6, 100.0 * p.ns / total,
			(unsigned long long)p.dispatches, (unsigned long long)p.threads, double(p.cpu) / double(p.threads));
	}
	fprintf(f, "%-32s %10.1f\n\n", "total", total / 1e6);
	fclose(f);
}

static void do_run() {
	uint32_t n = rd<uint32_t>();
	std::string err;
	uint32_t failed_at = 0;
	for (uint32_t di = 0; di < n; di++) {
		Dispatch d = {};
		uint32_t k = rd<uint32_t>();
		for (int i = 0; i < 3; i++) d.groups[i] = rd<uint32_t>();
		for (int i = 0; i < 3; i++) d.threads[i] = rd<uint32_t>();
		std::vector<std::pair<uint32_t, std::pair<uint8_t, uint32_t>>> consts;
		uint32_t nc = rd<uint32_t>();
		for (uint32_t i = 0; i < nc; i++) {
			uint32_t idx = rd<uint32_t>();
			uint8_t t = rd<uint8_t>();
			uint32_t bits = rd<uint32_t>();
			consts.push_back({idx, {t, bits}});
		}
		uint32_t nb = rd<uint32_t>();
		std::vector<std::pair<Buffer, std::pair<uint64_t, uint64_t>>> regions;
		for (uint32_t i = 0; i < nb; i++) {
			uint32_t idx = rd<uint32_t>(), id = rd<uint32_t>();
			uint64_t off = rd<uint64_t>(), len = rd<uint64_t>();
			auto it = buffers.find(id);
			if (idx < MSL_MAX_BINDINGS && it != buffers.end()) {
				d.buf[idx] = it->second.p + off;
				regions.push_back({it->second, {off, len ? len : it->second.n - off}});
			}
		}
		std::vector<void *> bytes;
		uint32_t nby = rd<uint32_t>();
		for (uint32_t i = 0; i < nby; i++) {
			uint32_t idx = rd<uint32_t>(), len = rd<uint32_t>();
			void *p = malloc(len ? len : 1); // exactly len bytes: reading past the struct is caught
			rd(p, len);
			bytes.push_back(p);
			if (idx < MSL_MAX_BINDINGS) d.buf[idx] = p;
		}
		uint32_t ns = rd<uint32_t>();
		for (uint32_t i = 0; i < ns; i++) {
			uint32_t idx = rd<uint32_t>(), size = rd<uint32_t>();
			if (idx < MSL_MAX_BINDINGS) d.shared[idx] = size;
		}
		if (err.empty()) {
			if ((int)k >= __msl_nkernels) {
				err = "no kernel " + std::to_string(k);
				failed_at = di;
			} else {
				d.k = &__msl_kernels[k];
				running_kernel = d.k->name;
				running_dispatch = (int)di;
				set_constants(consts);
				fence(regions, true);
				uint64_t t0 = profile_path ? now_ns() : 0, c0 = profile_path ? now_ns(CLOCK_PROCESS_CPUTIME_ID) : 0;
				err = pool.run(d);
				if (profile_path) {
					KernelProfile &p = profile[k];
					p.ns += now_ns() - t0;
					p.cpu += now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
					p.dispatches++;
					p.threads += uint64_t(d.groups[0]) * d.groups[1] * d.groups[2] * d.threads[0] * d.threads[1] * d.threads[2];
				}
				fence(regions, false);
				if (!err.empty()) failed_at = di;
			}
		}
		for (void *p : bytes) free(p);
	}
	running_kernel = "";
	running_dispatch = -1;
	if (err.empty())
		reply_ok();
	else
		reply_err(ST_ERR, failed_at, err);
}

int main(int argc, char **argv) {
#ifdef MSL_ASAN
	__sanitizer_set_death_callback(death_callback);
#endif
	int nthreads = 2;
	if (const char *s = getenv("REDLITE_HARNESS_THREADS")) nthreads = atoi(s) > 0 ? atoi(s) : 2;
	pool.start(nthreads);
	profile_path = getenv("REDLITE_HARNESS_PROFILE");
	profile.resize(__msl_nkernels);
	static char inbuf[1 << 16], outbuf[1 << 16];
	setvbuf(stdin, inbuf, _IOFBF, sizeof inbuf);
	setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
	// Say hello with the kernel count so the Go side knows the library it talks to, then each
	// kernel's static threadgroup memory.
	wr<uint32_t>(0x4d534c48);
	wr<uint32_t>((uint32_t)__msl_nkernels);
	for (int i = 0; i < __msl_nkernels; i++) wr<uint32_t>(__msl_kernels[i].static_tg);
	fflush(stdout);
	for (;;) {
		int op = fgetc(stdin);
		// The Go side closed the pipe: quit at once (returning from main would destroy the
		// worker pool's threads while they wait).
		if (op == EOF) {
			write_profile();
			_exit(0);
		}
		switch (op) {
		case OP_NEW: {
			uint32_t id = rd<uint32_t>();
			uint64_t n = rd<uint64_t>();
			char *p = (char *)calloc(n, 1);
			if (!p) {
				reply_err(ST_OOM, 0, "cannot allocate " + std::to_string(n) + " bytes");
				break;
			}
			buffers[id] = {p, n};
			reply_ok();
			break;
		}
		case OP_WRITE: {
			uint32_t id = rd<uint32_t>();
			uint64_t off = rd<uint64_t>(), n = rd<uint64_t>();
			auto it = buffers.find(id);
			if (it == buffers.end() || off + n > it->second.n) {
				std::vector<char> skip(n);
				rd(skip.data(), n);
				reply_err(ST_ERR, 0, "write outside buffer " + std::to_string(id));
				break;
			}
			rd(it->second.p + off, n);
			reply_ok();
			break;
		}
		case OP_READ: {
			uint32_t id = rd<uint32_t>();
			uint64_t off = rd<uint64_t>(), n = rd<uint64_t>();
			auto it = buffers.find(id);
			if (it == buffers.end() || off + n > it->second.n) {
				reply_err(ST_ERR, 0, "read outside buffer " + std::to_string(id));
				break;
			}
			wr<uint8_t>(ST_OK);
			wr(it->second.p + off, n);
			fflush(stdout);
			break;
		}
		case OP_FREE: {
			uint32_t id = rd<uint32_t>();
			auto it = buffers.find(id);
			if (it != buffers.end()) {
				free(it->second.p);
				buffers.erase(it);
			}
			reply_ok();
			break;
		}
		case OP_RUN:
			do_run();
			break;
		case OP_PING:
			reply_ok();
			break;
		default:
			fprintf(stderr, "harness: unknown request %d\n", op);
			return 2;
		}
	}
}

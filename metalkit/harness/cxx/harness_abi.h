// harness_abi.h: what the generated library (msl.h + kernels + glue) and the runtime
// (runtime.cpp) share. Plain C types only: the runtime is compiled without msl.h, whose
// address-space macros would break the standard headers.
#ifndef MSL_HARNESS_ABI_H
#define MSL_HARNESS_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MSL_MAX_BINDINGS 31

// One thread's view of a dispatch: its bindings and its thread attributes.
struct __msl_ctx {
	void *const *buf; // [[buffer(n)]]: the bound address (buffer base + offset) or the bytes
	void *const *tg;  // [[threadgroup(n)]]: this threadgroup's memory
	uint32_t tpig[3], tpitg[3], tgpig[3], tptg[3], tgpg[3], tpgrid[3];
	uint32_t tiitg, sgitg, tiisg, sgptg, tpsg;
};

// A lane's part of a SIMD-group operation: its operand, where its result goes, and its
// argument (the lane, delta or mask of shuffles).
struct __msl_slot {
	const void *in;
	void *out;
	int32_t arg;
};

// Computes every active lane's result once all of them have arrived; lanes[i] is null
// when lane i is not taking part (finished, beyond the threadgroup, or elsewhere).
typedef void (*__msl_simd_fn)(struct __msl_slot *const *lanes);
typedef void (*__msl_kernel_fn)(const struct __msl_ctx *);

struct __msl_kernel_desc {
	const char *name;
	__msl_kernel_fn fn;
	uint32_t static_tg; // bytes of threadgroup memory the kernel declares (every declaration, reached or not)
};

void __msl_barrier(const char *op, const char *file, uint32_t line, uint32_t col);
void __msl_simd_sync(struct __msl_slot *s, __msl_simd_fn fn, const char *op, const char *file, uint32_t line, uint32_t col);
void *__msl_tg_alloc(const void *key, size_t size, size_t align);
__attribute__((noreturn)) void __msl_fail(const char *msg);

// Function constants: the generated code registers each variable at start-up; the runtime
// sets them (or marks them undefined) before every dispatch.
enum { MSL_FC_BOOL = 1, MSL_FC_INT = 2, MSL_FC_UINT = 3, MSL_FC_FLOAT = 4, MSL_FC_HALF = 5,
	MSL_FC_SHORT = 6, MSL_FC_USHORT = 7, MSL_FC_CHAR = 8, MSL_FC_UCHAR = 9 };
int __msl_fc_register(int index, void *var, int type, bool *defined);

extern const struct __msl_kernel_desc __msl_kernels[];
extern const int __msl_nkernels;

#ifdef __cplusplus
}
#endif
#endif

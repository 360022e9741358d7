// selftest.metal: kernels that exercise the shim and the runtime, for harness_test.go.
// Not part of the GPU library: the tests append this file to kernels.Source().
#include <metal_stdlib>
using namespace metal;

struct st_args {
	int32_t n;
	float scale;
};

constant int   FC_MUL  [[function_constant(0)]];
constant bool  FC_FLAG [[function_constant(1)]];
constant float FC_BIAS [[function_constant(2)]];

// c = (a + b) * scale, one thread per element, threads past n return.
kernel void st_add(
		constant st_args & args [[buffer(0)]],
		device const float * a  [[buffer(1)]],
		device const float * b  [[buffer(2)]],
		device float * c        [[buffer(3)]],
		uint tid [[thread_position_in_grid]]) {
	if ((int) tid >= args.n) {
		return;
	}
	c[tid] = (a[tid] + b[tid]) * args.scale;
}

// Every SIMD-group function on x; out holds 12 values per thread.
kernel void st_simd(
		device const float * x [[buffer(1)]],
		device float * out     [[buffer(2)]],
		uint tid   [[thread_position_in_grid]],
		ushort lane [[thread_index_in_simdgroup]],
		ushort sg   [[simdgroup_index_in_threadgroup]]) {
	const float v = x[tid];
	device float * o = out + tid * 12;
	o[0] = simd_sum(v);
	o[1] = simd_max(v);
	o[2] = simd_min(v);
	o[3] = simd_prefix_inclusive_sum(v);
	o[4] = simd_prefix_exclusive_sum(v);
	o[5] = simd_shuffle(v, (lane + 3) % 32);
	o[6] = simd_shuffle_down(v, 4);
	o[7] = simd_shuffle_xor(v, 1);
	o[8] = simd_broadcast(v, 2);
	o[9] = simd_shuffle_up(v, 1);
	o[10] = simd_broadcast_first(v);
	o[11] = simd_any(v > 100.0f) ? 1.0f : 0.0f;
	(void) sg;
}

// Sum of each threadgroup's inputs through threadgroup memory: a kernel-scope array for
// the per-SIMD-group partial sums and a [[threadgroup(0)]] buffer for the values.
kernel void st_reduce(
		constant st_args & args  [[buffer(0)]],
		device const float * x   [[buffer(1)]],
		device float * out       [[buffer(2)]],
		threadgroup float * vals [[threadgroup(0)]],
		uint3 tgpig [[threadgroup_position_in_grid]],
		uint3 tpitg [[thread_position_in_threadgroup]],
		uint3 ntg   [[threads_per_threadgroup]],
		uint sgitg  [[simdgroup_index_in_threadgroup]],
		uint tiisg  [[thread_index_in_simdgroup]],
		uint nsg    [[simdgroups_per_threadgroup]]) {
	threadgroup float partial[32];
	const uint i = tgpig.x * ntg.x + tpitg.x;
	vals[tpitg.x] = (int) i < args.n ? x[i] : 0.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	// Read a neighbour's value: only correct if the barrier really waited for every thread.
	float v = vals[(tpitg.x + 1) % ntg.x];
	float s = simd_sum(v);
	if (tiisg == 0) {
		partial[sgitg] = s;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (tpitg.x == 0) {
		float t = 0.0f;
		for (uint k = 0; k < nsg; k++) {
			t += partial[k];
		}
		out[tgpig.x] = t;
	}
}

// Function constants: FC_MUL, FC_FLAG (and whether it is defined), FC_BIAS.
kernel void st_consts(
		device float * out [[buffer(1)]],
		uint tid [[thread_position_in_grid]]) {
	if (tid != 0) {
		return;
	}
	out[0] = float(FC_MUL * 2);
	out[1] = is_function_constant_defined(FC_FLAG) ? 1.0f : 0.0f;
	out[2] = FC_FLAG ? 1.0f : 0.0f;
	out[3] = is_function_constant_defined(FC_BIAS) ? FC_BIAS : -1.0f;
}

// half rounding and half vectors: out = float(half(x)), and a half4 dot product.
kernel void st_half(
		device const float * x [[buffer(1)]],
		device float * out     [[buffer(2)]],
		device half * hout     [[buffer(3)]],
		uint tid [[thread_position_in_grid]]) {
	half h = half(x[tid]);
	out[tid] = float(h);
	hout[tid] = h + 1.0h;
}

// half arithmetic rounds after each operation: out = float(x0 + x1 + x2) in half.
kernel void st_half_ops(
		device const half * x [[buffer(1)]],
		device float * out    [[buffer(2)]]) {
	out[0] = float(x[0] + x[1] + x[2]);
}

// Lanes run in an order that alternates between threadgroups: reading a neighbour's
// threadgroup value without a barrier must show up in one of two threadgroups.
kernel void st_race(
		device float * out [[buffer(1)]],
		uint tid  [[thread_index_in_threadgroup]],
		uint ntg  [[threads_per_threadgroup]],
		uint3 tgpig [[threadgroup_position_in_grid]]) {
	threadgroup float sh[64];
	sh[tid] = float(tid);
	out[tgpig.x * ntg + tid] = sh[(tid + ntg - 1) % ntg]; // no barrier: wrong
}

// Vector constructors and swizzles; out holds 4 float4 per thread.
kernel void st_vec(
		device const float4 * x [[buffer(1)]],
		device float4 * out     [[buffer(2)]],
		uint tid [[thread_position_in_grid]]) {
	float4 v = x[tid];
	float2 a = v.xy;
	float2 b = v.zw;
	out[tid * 4 + 0] = float4(b, a);
	out[tid * 4 + 1] = float4(v.wzy, 7.0f) + 1.0f;
	float4 s = 2.0f;
	s.yz = float2(a.y, b.x) * 10.0f;
	out[tid * 4 + 2] = s;
	half4 h = half4(v);
	out[tid * 4 + 3] = float4(dot(v, v), float(h.x + h.y), max(v.x, v.w), select(0.0f, 1.0f, v.x < v.y));
}

// A template kernel instantiated under two host names.
template <typename T>
kernel void st_scale(
		device const T * x [[buffer(1)]],
		device T * y       [[buffer(2)]],
		uint tid [[thread_position_in_grid]]) {
	y[tid] = x[tid] * T(3);
}
typedef decltype(st_scale<float>) st_scale_t;
template [[host_name("st_scale_f32")]] kernel st_scale_t st_scale<float>;
template [[host_name("st_scale_f16")]] kernel st_scale_t st_scale<half>;

// Writes one element past the end of its output: AddressSanitizer must catch it.
kernel void st_oob(
		constant st_args & args [[buffer(0)]],
		device float * out      [[buffer(1)]],
		uint tid [[thread_position_in_grid]]) {
	out[tid + (tid == 0 ? args.n : 0)] = 1.0f;
}

// Lanes of one SIMD group call different simd functions: an error, not a hang.
kernel void st_diverge(
		device float * out [[buffer(1)]],
		uint tid [[thread_position_in_grid]]) {
	float v = float(tid);
	if (tid < 5) {
		v = simd_sum(v);
	} else {
		v = simd_max(v);
	}
	out[tid] = v;
}

// Half the threads return before a barrier the other half waits at.
kernel void st_early_return(
		device float * out [[buffer(1)]],
		uint tid [[thread_index_in_threadgroup]]) {
	threadgroup float t[64];
	if (tid >= 32) {
		return;
	}
	t[tid] = 1.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[tid] = t[(tid + 1) % 32];
}

// c[16×16] = a[16×8]·b[8×16] + 1 with SIMD-group matrices: a through threadgroup memory as
// half, b from device memory transposed (bt is b's transpose, 16×8).
kernel void st_simdgroup_matrix(
		device const float * a  [[buffer(1)]],
		device const float * bt [[buffer(2)]],
		device float * c        [[buffer(3)]],
		ushort tiitg [[thread_index_in_threadgroup]]) {
	threadgroup half ta[16 * 8];
	for (int i = tiitg; i < 16 * 8; i += 32) {
		ta[i] = half(a[i]);
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	simdgroup_half8x8 ma[2];
	simdgroup_float8x8 mb[2];
	for (int i = 0; i < 2; i++) {
		simdgroup_load(ma[i], ta + 64 * i, 8);
		simdgroup_load(mb[i], bt, 8, ulong2(0, 8 * i), true);
	}
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			simdgroup_float8x8 mc = make_filled_simdgroup_matrix<float, 8>(1.0f);
			simdgroup_multiply_accumulate(mc, ma[i], mb[j], mc);
			simdgroup_store(mc, c, 16, ulong2(8 * j, 8 * i));
		}
	}
}

// Never finishes: waits for a flag nobody sets (an atomic load, so the loop is not undefined
// behaviour the compiler may delete).
kernel void st_hang(
		device atomic_int * flag [[buffer(1)]]) {
	while (atomic_load_explicit(flag, memory_order_relaxed) == 0) {
	}
}

// More kernel-scope threadgroup memory than a threadgroup has (32 KiB).
kernel void st_too_much_shared(
		device float * out [[buffer(1)]],
		uint tid [[thread_index_in_threadgroup]]) {
	threadgroup float big[8192];
	threadgroup float more[4];
	big[tid] = 1.0f;
	more[tid % 4] = 2.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[tid] = big[tid] + more[tid % 4];
}

// Every thread returns before the declaration: a GPU allocates it all the same (32 KiB, with
// the 16 bytes the dispatch sets: too much).
kernel void st_static_unreached(
		device float * out [[buffer(1)]],
		threadgroup float * dyn [[threadgroup(0)]],
		uint tid [[thread_index_in_threadgroup]]) {
	if (tid < 4096) {
		out[tid] = 1.0f;
		return;
	}
	threadgroup float big[8192];
	big[tid % 8192] = dyn[0];
	out[tid] = big[tid % 8192];
}

// Metal's min and max on floating types are fmin and fmax: a NaN argument gives the other.
kernel void st_nan_minmax(
		device float * out [[buffer(1)]]) {
	const float n = as_type<float>(0x7fc00000u);
	const half hn = half(n);
	out[0] = max(n, 1.0f);
	out[1] = max(1.0f, n);
	out[2] = min(n, 1.0f);
	out[3] = min(1.0f, n);
	out[4] = float(max(hn, 2.0h));
	out[5] = float(min(2.0h, hn));
	const float2 v = max(float2(n, 3.0f), float2(4.0f, n));
	out[6] = v.x;
	out[7] = v.y;
	out[8] = max(n, n);
	out[9] = clamp(n, 0.0f, 1.0f);
	out[10] = float(max(3, 5));
}

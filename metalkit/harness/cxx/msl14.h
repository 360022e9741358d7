// msl14.h: the Metal Shading Language as Apple's compiler sees it, for the strict compile
// check (strict.go), not for running anything: C++14 (Metal 3.0's base), no standard
// library, device/constant/threadgroup as distinct clang address spaces (a pointer into one
// does not convert to another, or to a thread pointer, as on a GPU), and Metal's overload
// sets declared as Metal has them (min(float, int) is ambiguous, as there). Functions are
// declared, never defined: the check stops after semantic analysis.
//
// Only what the kernels use is here; a kernel using more fails the check with an unknown
// name, and the declaration goes here, as Apple's reference states it.

#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#define thread
#define kernel

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX __FLT_MAX__
#define FLT_MIN __FLT_MIN__
#define FLT_EPSILON __FLT_EPSILON__
#define HALF_MAX ((half)65504.0f)
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_SQRT2_F 1.41421356237309504880168872420969808f

namespace metal {

typedef _Float16 half;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef unsigned long size_t;

template <class T> struct __vinfo {
	typedef T E;
	enum { n = 1 };
};
template <int N> struct __n {};

// Vector types: clang's extended vectors have Metal's sizes (a 3-vector takes 16 bytes),
// components, swizzles and operators.
#define MSL14_VEC1(T, N)                                                                          \
	typedef T T##N __attribute__((ext_vector_type(N)));                                            \
	template <> struct __vinfo<T##N> {                                                             \
		typedef T E;                                                                               \
		enum { n = N };                                                                            \
	};
#define MSL14_VEC(T) MSL14_VEC1(T, 2) MSL14_VEC1(T, 3) MSL14_VEC1(T, 4)
MSL14_VEC(float)
MSL14_VEC(half)
MSL14_VEC(char)
MSL14_VEC(uchar)
MSL14_VEC(short)
MSL14_VEC(ushort)
MSL14_VEC(int)
MSL14_VEC(uint)
MSL14_VEC(long)
MSL14_VEC(ulong)

// A vector constructor, float4(x): a scalar is replicated, a vector converted element-wise
// (counts must agree), several scalars are the elements.
template <class V, class A> inline V __make1(A a, __n<1>) { return (V)(typename __vinfo<V>::E)a; }
template <class V, class A, int N> inline V __make1(A a, __n<N>) { return __builtin_convertvector(a, V); }
template <class V, class A> inline V __make(A a) { return __make1<V>(a, __n<__vinfo<A>::n>()); }
template <class V, class A, class B, class... R> inline V __make(A a, B b, R... r) {
	typedef typename __vinfo<V>::E E;
	static_assert(2 + sizeof...(R) == __vinfo<V>::n, "vector constructor: one argument per component");
	return V{E(a), E(b), E(r)...};
}

// Math: declared for float, half and their vectors (precise:: and fast:: the same).
#define MSL14_F1(name)                                                                            \
	float name(float);                                                                             \
	float2 name(float2);                                                                           \
	float3 name(float3);                                                                           \
	float4 name(float4);                                                                           \
	half name(half);                                                                               \
	half2 name(half2);                                                                             \
	half3 name(half3);                                                                             \
	half4 name(half4);
#define MSL14_F2(name)                                                                            \
	float name(float, float);                                                                      \
	float2 name(float2, float2);                                                                   \
	float3 name(float3, float3);                                                                   \
	float4 name(float4, float4);                                                                   \
	half name(half, half);                                                                         \
	half2 name(half2, half2);                                                                      \
	half3 name(half3, half3);                                                                      \
	half4 name(half4, half4);
#define MSL14_MATH                                                                                \
	MSL14_F1(exp)                                                                                  \
	MSL14_F1(exp2)                                                                                 \
	MSL14_F1(log)                                                                                  \
	MSL14_F1(log2)                                                                                 \
	MSL14_F1(sqrt)                                                                                 \
	MSL14_F1(rsqrt)                                                                                \
	MSL14_F1(sin)                                                                                  \
	MSL14_F1(cos)                                                                                  \
	MSL14_F1(tanh)                                                                                 \
	MSL14_F1(erf)                                                                                  \
	MSL14_F1(floor)                                                                                \
	MSL14_F1(ceil)                                                                                 \
	MSL14_F1(round)                                                                                \
	MSL14_F1(rint)                                                                                 \
	MSL14_F1(trunc)                                                                                \
	MSL14_F1(fabs)                                                                                 \
	MSL14_F1(fract)                                                                                \
	MSL14_F1(saturate)                                                                             \
	MSL14_F2(fmin)                                                                                 \
	MSL14_F2(fmax)                                                                                 \
	MSL14_F2(pow)                                                                                  \
	MSL14_F2(powr)                                                                                 \
	MSL14_F2(fmod)                                                                                 \
	MSL14_F2(copysign)
MSL14_MATH
namespace precise {
MSL14_MATH
}
namespace fast {
MSL14_MATH
}
MSL14_F1(sign)
bool isnan(float);
bool isnan(half);
bool isinf(float);
bool isinf(half);
bool isfinite(float);
bool isfinite(half);
float dot(float2, float2);
float dot(float3, float3);
float dot(float4, float4);
half dot(half2, half2);
half dot(half3, half3);
half dot(half4, half4);
float fma(float, float, float);
half fma(half, half, half);
float4 fma(float4, float4, float4);

// min, max, clamp, abs: one overload per type, as Metal declares them (no templates: mixed
// arguments are ambiguous or convert as C++ decides for these candidates, as on a GPU).
#define MSL14_MM1(T)                                                                              \
	T min(T, T);                                                                                   \
	T max(T, T);                                                                                   \
	T clamp(T, T, T);
#define MSL14_MM(T) MSL14_MM1(T) MSL14_MM1(T##2) MSL14_MM1(T##3) MSL14_MM1(T##4)
MSL14_MM(float)
MSL14_MM(half)
MSL14_MM(char)
MSL14_MM(uchar)
MSL14_MM(short)
MSL14_MM(ushort)
MSL14_MM(int)
MSL14_MM(uint)
MSL14_MM(long)
MSL14_MM(ulong)
int abs(int);
long abs(long);
short abs(short);
char abs(char);

template <class T, class F> T as_type(F);
template <class T> T select(T, T, bool);

// SIMD-group and threadgroup functions.
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
void threadgroup_barrier(mem_flags);
void simdgroup_barrier(mem_flags);
template <class T> T simd_sum(T);
template <class T> T simd_product(T);
template <class T> T simd_max(T);
template <class T> T simd_min(T);
template <class T> T simd_prefix_exclusive_sum(T);
template <class T> T simd_prefix_inclusive_sum(T);
template <class T> T simd_broadcast(T, ushort);
template <class T> T simd_broadcast_first(T);
template <class T> T simd_shuffle(T, ushort);
template <class T> T simd_shuffle_xor(T, ushort);
template <class T> T simd_shuffle_down(T, ushort);
template <class T> T simd_shuffle_up(T, ushort);
bool simd_all(bool);
bool simd_any(bool);

// SIMD-group matrices: loads and stores from device or threadgroup memory only.
template <class T, int Cols, int Rows = Cols> struct simdgroup_matrix {
	simdgroup_matrix();
	explicit simdgroup_matrix(T);
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
template <class T, int C, int R = C> simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T);
template <class T, int C, int R>
void simdgroup_load(thread simdgroup_matrix<T, C, R> &, const device T *, ulong = C, ulong2 = ulong2(0), bool = false);
template <class T, int C, int R>
void simdgroup_load(thread simdgroup_matrix<T, C, R> &, const threadgroup T *, ulong = C, ulong2 = ulong2(0), bool = false);
template <class T, int C, int R>
void simdgroup_store(thread simdgroup_matrix<T, C, R>, device T *, ulong = C, ulong2 = ulong2(0), bool = false);
template <class T, int C, int R>
void simdgroup_store(thread simdgroup_matrix<T, C, R>, threadgroup T *, ulong = C, ulong2 = ulong2(0), bool = false);
template <class T, class A, class B, class C, int N, int M, int K>
void simdgroup_multiply_accumulate(thread simdgroup_matrix<T, N, M> &, thread const simdgroup_matrix<A, K, M> &,
                                   thread const simdgroup_matrix<B, N, K> &, thread const simdgroup_matrix<C, N, M> &);

} // namespace metal

// Vector constructors: float4(x), ulong2(a, b), … (function-like macros: the type names alone
// are the typedefs above).
#define MSL14_CTOR(T) metal::__make<metal::T>
#define float2(...) MSL14_CTOR(float2)(__VA_ARGS__)
#define float3(...) MSL14_CTOR(float3)(__VA_ARGS__)
#define float4(...) MSL14_CTOR(float4)(__VA_ARGS__)
#define half2(...) MSL14_CTOR(half2)(__VA_ARGS__)
#define half3(...) MSL14_CTOR(half3)(__VA_ARGS__)
#define half4(...) MSL14_CTOR(half4)(__VA_ARGS__)
#define int2(...) MSL14_CTOR(int2)(__VA_ARGS__)
#define int3(...) MSL14_CTOR(int3)(__VA_ARGS__)
#define int4(...) MSL14_CTOR(int4)(__VA_ARGS__)
#define uint2(...) MSL14_CTOR(uint2)(__VA_ARGS__)
#define uint3(...) MSL14_CTOR(uint3)(__VA_ARGS__)
#define uint4(...) MSL14_CTOR(uint4)(__VA_ARGS__)
#define ushort2(...) MSL14_CTOR(ushort2)(__VA_ARGS__)
#define ushort3(...) MSL14_CTOR(ushort3)(__VA_ARGS__)
#define ushort4(...) MSL14_CTOR(ushort4)(__VA_ARGS__)
#define uchar2(...) MSL14_CTOR(uchar2)(__VA_ARGS__)
#define uchar4(...) MSL14_CTOR(uchar4)(__VA_ARGS__)
#define ulong2(...) MSL14_CTOR(ulong2)(__VA_ARGS__)

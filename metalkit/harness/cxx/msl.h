// msl.h: the Metal Shading Language as C++20, enough of it for our kernels to compile with
// clang and run on the CPU under the harness runtime. The generator (gen.go) rewrites what
// a header cannot express (kernel-scope threadgroup variables, function constants, kernel
// parameter attributes, half literals) and writes the glue that calls each kernel.
//
// Adding a feature: put it here (in namespace metal unless it is a type), add a case to
// testdata/selftest.metal and a test in harness_test.go.
#ifndef MSL_HARNESS_SHIM_H
#define MSL_HARNESS_SHIM_H

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <type_traits>
#include <utility>

#include "harness_abi.h"

// ---------------------------------------------------------------- scalar types
typedef _Float16 half;
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

template <class T> struct __msl_is_scalar : std::bool_constant<std::is_arithmetic_v<T> || std::is_same_v<T, half>> {};

// ---------------------------------------------------------------- vectors
// Class-based so that MSL's constructors exist (float4(a, b, c, d), float4(v2, v2),
// float4(x)); a 3-vector takes the room of a 4-vector as in MSL (float3 is 16 bytes).
template <class T, int N> struct __vec;
template <class T, int M, int... I> struct __swz;

template <class V> struct __vinfo {
	static constexpr int n = 0;
	using elem = V;
};
template <class T, int N> struct __vinfo<__vec<T, N>> {
	static constexpr int n = N;
	using elem = T;
	using vec = __vec<T, N>;
};
template <class T, int M, int... I> struct __vinfo<__swz<T, M, I...>> {
	static constexpr int n = sizeof...(I);
	using elem = T;
	using vec = __vec<T, sizeof...(I)>;
};
template <class V> concept __vecish = (__vinfo<std::remove_cvref_t<V>>::n > 0);
template <class V> concept __scalarish = __msl_is_scalar<std::remove_cvref_t<V>>::value;
template <class V> constexpr int __ncomp = __vinfo<std::remove_cvref_t<V>>::n ? __vinfo<std::remove_cvref_t<V>>::n : 1;
template <class V> using __elem_t = typename __vinfo<std::remove_cvref_t<V>>::elem;

// A swizzle (.xy, .zyx, …): a view of the vector's storage, readable as a vector and
// assignable. Its copy assignment assigns the components it names, so the vector that holds
// it in a union defines its own copy assignment.
template <class T, int M, int... I> struct __swz {
	static constexpr int K = sizeof...(I);
	using V = __vec<T, K>;
	T *p() { return reinterpret_cast<T *>(this); }
	const T *p() const { return reinterpret_cast<const T *>(this); }
	operator V() const { return V(p()[I]...); }
	__swz &operator=(const __swz &o) { return *this = V(o); }
	__swz &operator=(const V &v) {
		int k = 0;
		((p()[I] = v.e[k++]), ...);
		return *this;
	}
	template <class U> requires(__vecish<U> || __scalarish<U>) __swz &operator=(const U &u) { return *this = V(u); }
	template <class U> __swz &operator+=(const U &u) { return *this = V(*this) + u; }
	template <class U> __swz &operator-=(const U &u) { return *this = V(*this) - u; }
	template <class U> __swz &operator*=(const U &u) { return *this = V(*this) * u; }
	template <class U> __swz &operator/=(const U &u) { return *this = V(*this) / u; }
	T operator[](int i) const {
		constexpr int idx[] = {I...};
		return p()[idx[i]];
	}
};

template <class V> inline auto __tovec(const V &v) {
	if constexpr (__vinfo<V>::n > 0)
		return typename __vinfo<V>::vec(v);
	else
		return v;
}

#include "msl_swizzle.h"

#define MSL_VEC_COMMON(N)                                                                          \
	__vec() = default;                                                                             \
	__vec(const __vec &) = default;                                                                \
	__vec &operator=(const __vec &o) {                                                             \
		for (int i = 0; i < N; i++) e[i] = o.e[i];                                                 \
		return *this;                                                                              \
	}                                                                                              \
	template <class S> requires __scalarish<S> __vec(S s) {                                          \
		for (int i = 0; i < N; i++) e[i] = T(s);                                                   \
	}                                                                                              \
	template <class... A> requires(sizeof...(A) >= 2 && (__ncomp<A> + ...) == N) __vec(const A &...a) { \
		int k = 0;                                                                                 \
		(__fill(k, a), ...);                                                                       \
	}                                                                                              \
	template <class U> explicit __vec(const __vec<U, N> &o) {                                      \
		for (int i = 0; i < N; i++) e[i] = T(o.e[i]);                                              \
	}                                                                                              \
	template <class U, int M, int... I> requires(sizeof...(I) == N && !std::is_same_v<U, T>)       \
	explicit __vec(const __swz<U, M, I...> &s) : __vec(__vec<U, N>(s)) {}                          \
	template <class A> void __fill(int &k, const A &a) {                                           \
		if constexpr (__vinfo<A>::n == 0) {                                                        \
			e[k++] = T(a);                                                                         \
		} else {                                                                                   \
			auto v = __tovec(a);                                                                   \
			for (int i = 0; i < __vinfo<A>::n; i++) e[k++] = T(v.e[i]);                            \
		}                                                                                          \
	}                                                                                              \
	T &operator[](int i) { return e[i]; }                                                          \
	const T &operator[](int i) const { return e[i]; }                                              \
	template <class B> __vec &operator+=(const B &b) { return *this = *this + b; }                 \
	template <class B> __vec &operator-=(const B &b) { return *this = *this - b; }                 \
	template <class B> __vec &operator*=(const B &b) { return *this = *this * b; }                 \
	template <class B> __vec &operator/=(const B &b) { return *this = *this / b; }                 \
	template <class B> __vec &operator%=(const B &b) { return *this = *this % b; }                 \
	template <class B> __vec &operator&=(const B &b) { return *this = *this & b; }                 \
	template <class B> __vec &operator|=(const B &b) { return *this = *this | b; }                 \
	template <class B> __vec &operator^=(const B &b) { return *this = *this ^ b; }                 \
	template <class B> __vec &operator<<=(const B &b) { return *this = *this << b; }               \
	template <class B> __vec &operator>>=(const B &b) { return *this = *this >> b; }

template <class T> struct alignas(2 * sizeof(T)) __vec<T, 2> {
	union {
		T e[2];
		struct {
			T x, y;
		};
		MSL_SWIZZLES2(T)
	};
	MSL_VEC_COMMON(2)
};
template <class T> struct alignas(4 * sizeof(T)) __vec<T, 3> {
	union {
		T e[3];
		struct {
			T x, y, z;
		};
		MSL_SWIZZLES3(T)
	};
	MSL_VEC_COMMON(3)
};
template <class T> struct alignas(4 * sizeof(T)) __vec<T, 4> {
	union {
		T e[4];
		struct {
			T x, y, z, w;
		};
		MSL_SWIZZLES4(T)
	};
	MSL_VEC_COMMON(4)
};

#define MSL_VEC_TYPES(T, name)                                                                     \
	typedef __vec<T, 2> name##2;                                                                   \
	typedef __vec<T, 3> name##3;                                                                   \
	typedef __vec<T, 4> name##4;
MSL_VEC_TYPES(float, float)
MSL_VEC_TYPES(half, half)
MSL_VEC_TYPES(int, int)
MSL_VEC_TYPES(uint, uint)
MSL_VEC_TYPES(short, short)
MSL_VEC_TYPES(ushort, ushort)
MSL_VEC_TYPES(char, char)
MSL_VEC_TYPES(uchar, uchar)
MSL_VEC_TYPES(bool, bool)
MSL_VEC_TYPES(long, long)
MSL_VEC_TYPES(ulong, ulong)

// packed_ vectors: no padding, element alignment (packed_float3 is 12 bytes).
template <class T, int N> struct __packed {
	T e[N];
	__packed() = default;
	__packed(const __vec<T, N> &v) {
		for (int i = 0; i < N; i++) e[i] = v.e[i];
	}
	template <class... A> requires(sizeof...(A) >= 2) __packed(const A &...a) : __packed(__vec<T, N>(a...)) {}
	operator __vec<T, N>() const {
		__vec<T, N> v;
		for (int i = 0; i < N; i++) v.e[i] = e[i];
		return v;
	}
	T &operator[](int i) { return e[i]; }
	const T &operator[](int i) const { return e[i]; }
};
#define MSL_PACKED_TYPES(T, name)                                                                  \
	typedef __packed<T, 2> packed_##name##2;                                                       \
	typedef __packed<T, 3> packed_##name##3;                                                       \
	typedef __packed<T, 4> packed_##name##4;
MSL_PACKED_TYPES(float, float)
MSL_PACKED_TYPES(half, half)
MSL_PACKED_TYPES(int, int)
MSL_PACKED_TYPES(uint, uint)
MSL_PACKED_TYPES(short, short)
MSL_PACKED_TYPES(ushort, ushort)
MSL_PACKED_TYPES(char, char)
MSL_PACKED_TYPES(uchar, uchar)

// ---------------------------------------------------------------- vector operators
template <class A, class B> concept __vbinop = (__vecish<A> && __vecish<B> && __vinfo<A>::n == __vinfo<B>::n) ||
                                               (__vecish<A> && __scalarish<B>) || (__scalarish<A> && __vecish<B>);

template <class A, class B> struct __vres {
	using T = std::conditional_t<__vecish<A>, __elem_t<A>, __elem_t<B>>;
	static constexpr int N = __vecish<A> ? __vinfo<A>::n : __vinfo<B>::n;
};

template <class X> inline auto __comp(const X &x, int i) {
	if constexpr (__vinfo<X>::n > 0)
		return x[i];
	else
		return x;
}

#define MSL_VEC_BINOP(op)                                                                          \
	template <class A, class B> requires __vbinop<A, B> inline auto operator op(const A &a, const B &b) { \
		using R = __vres<A, B>;                                                                    \
		static_assert(!(__vecish<A> && __vecish<B>) || std::is_same_v<__elem_t<A>, __elem_t<B>>,  \
			      "MSL: vector operands of different element types");                          \
		__vec<typename R::T, R::N> r;                                                              \
		for (int i = 0; i < R::N; i++)                                                             \
			r.e[i] = typename R::T(typename R::T(__comp(a, i)) op typename R::T(__comp(b, i)));    \
		return r;                                                                                  \
	}
MSL_VEC_BINOP(+)
MSL_VEC_BINOP(-)
MSL_VEC_BINOP(*)
MSL_VEC_BINOP(/)
MSL_VEC_BINOP(%)
MSL_VEC_BINOP(&)
MSL_VEC_BINOP(|)
MSL_VEC_BINOP(^)
MSL_VEC_BINOP(<<)
MSL_VEC_BINOP(>>)

#define MSL_VEC_CMPOP(op)                                                                          \
	template <class A, class B> requires __vbinop<A, B> inline auto operator op(const A &a, const B &b) { \
		using R = __vres<A, B>;                                                                    \
		__vec<bool, R::N> r;                                                                       \
		for (int i = 0; i < R::N; i++) r.e[i] = typename R::T(__comp(a, i)) op typename R::T(__comp(b, i)); \
		return r;                                                                                  \
	}
MSL_VEC_CMPOP(==)
MSL_VEC_CMPOP(!=)
MSL_VEC_CMPOP(<)
MSL_VEC_CMPOP(>)
MSL_VEC_CMPOP(<=)
MSL_VEC_CMPOP(>=)
MSL_VEC_CMPOP(&&)
MSL_VEC_CMPOP(||)

template <class A> requires __vecish<A> inline auto operator-(const A &a) {
	auto v = __tovec(a);
	for (int i = 0; i < __vinfo<A>::n; i++) v.e[i] = -v.e[i];
	return v;
}
template <class A> requires __vecish<A> inline auto operator+(const A &a) { return __tovec(a); }
template <class A> requires __vecish<A> inline auto operator~(const A &a) {
	auto v = __tovec(a);
	for (int i = 0; i < __vinfo<A>::n; i++) v.e[i] = ~v.e[i];
	return v;
}
template <class A> requires __vecish<A> inline auto operator!(const A &a) {
	auto v = __tovec(a);
	__vec<bool, __vinfo<A>::n> r;
	for (int i = 0; i < __vinfo<A>::n; i++) r.e[i] = !v.e[i];
	return r;
}

// ---------------------------------------------------------------- address spaces, misc
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define MAXFLOAT 3.402823466e+38f
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define FLT_EPSILON 1.1920928955e-7f
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)6.103515625e-05f)
#define HALF_EPSILON ((half)0.0009765625f)
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_PI_2_F 1.57079632679489661923132169163975144f
#define M_1_PI_F 0.318309886183790671537767526745028724f
#define M_2_PI_F 0.636619772367581343075535053490057448f
#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_LN10_F 2.30258509299404568401799145468436421f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f

namespace metal {

template <class T, class F> requires(sizeof(T) == sizeof(F)) inline T as_type(const F &f) {
	T t;
	__builtin_memcpy(&t, &f, sizeof(T));
	return t;
}

// ---------------------------------------------------------------- math
// float functions go through clang's builtins (no <cmath>: its global overloads would clash
// with MSL's); half is computed in float and rounded, as precise as Metal's or more.
#define MSL_MAP1(name, expr)                                                                       \
	inline float name(float x) { return expr; }                                                    \
	inline float name(double d) { float x = float(d); return expr; }                              \
	inline half name(half h) { float x = float(h); return half(expr); }                           \
	template <class V> requires __vecish<V> inline auto name(const V &v) {                          \
		auto a = __tovec(v);                                                                       \
		for (int i = 0; i < __vinfo<V>::n; i++) a.e[i] = name(a.e[i]);                             \
		return a;                                                                                  \
	}
MSL_MAP1(exp, __builtin_expf(x))
MSL_MAP1(exp2, __builtin_exp2f(x))
MSL_MAP1(exp10, __builtin_powf(10.0f, x))
MSL_MAP1(log, __builtin_logf(x))
MSL_MAP1(log2, __builtin_log2f(x))
MSL_MAP1(log10, __builtin_log10f(x))
MSL_MAP1(sqrt, __builtin_sqrtf(x))
MSL_MAP1(rsqrt, 1.0f / __builtin_sqrtf(x))
MSL_MAP1(sin, __builtin_sinf(x))
MSL_MAP1(cos, __builtin_cosf(x))
MSL_MAP1(tan, __builtin_tanf(x))
MSL_MAP1(sinh, __builtin_sinhf(x))
MSL_MAP1(cosh, __builtin_coshf(x))
MSL_MAP1(tanh, __builtin_tanhf(x))
MSL_MAP1(asin, __builtin_asinf(x))
MSL_MAP1(acos, __builtin_acosf(x))
MSL_MAP1(atan, __builtin_atanf(x))
MSL_MAP1(erf, __builtin_erff(x))
MSL_MAP1(floor, __builtin_floorf(x))
MSL_MAP1(ceil, __builtin_ceilf(x))
MSL_MAP1(round, __builtin_roundf(x))
MSL_MAP1(trunc, __builtin_truncf(x))
MSL_MAP1(rint, __builtin_rintf(x))
MSL_MAP1(fabs, __builtin_fabsf(x))
MSL_MAP1(fract, x - __builtin_floorf(x))
MSL_MAP1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
MSL_MAP1(sign, x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f)

#define MSL_MAP1B(name, expr)                                                                      \
	inline bool name(float x) { return expr; }                                                     \
	inline bool name(half h) { float x = float(h); return expr; }                                 \
	template <class V> requires __vecish<V> inline auto name(const V &v) {                          \
		auto a = __tovec(v);                                                                       \
		__vec<bool, __vinfo<V>::n> r;                                                              \
		for (int i = 0; i < __vinfo<V>::n; i++) r.e[i] = name(a.e[i]);                             \
		return r;                                                                                  \
	}
MSL_MAP1B(isnan, __builtin_isnan(x))
MSL_MAP1B(isinf, __builtin_isinf(x))
MSL_MAP1B(isfinite, __builtin_isfinite(x))
MSL_MAP1B(signbit, __builtin_signbit(x))

// Integer and float abs, min, max, clamp: templates over any scalar pair, so that mixed
// literals (min(n, 32)) resolve as C++'s arithmetic conversions do.
template <class A, class B> using __common = std::conditional_t<std::is_same_v<A, B>, A, decltype(A() + B())>;

template <class T> requires __scalarish<T> inline T abs(T x) { return x < T(0) ? T(-x) : x; }
template <class V> requires __vecish<V> inline auto abs(const V &v) {
	auto a = __tovec(v);
	for (int i = 0; i < __vinfo<V>::n; i++) a.e[i] = abs(a.e[i]);
	return a;
}

#define MSL_MAP2(name, expr)                                                                       \
	template <class A, class B> requires(__scalarish<A> && __scalarish<B>) inline auto name(A a_, B b_) { \
		using T = __common<A, B>;                                                                  \
		T a = T(a_), b = T(b_);                                                                    \
		return T(expr);                                                                            \
	}                                                                                              \
	template <class A, class B> requires __vbinop<A, B> inline auto name(const A &a, const B &b) {  \
		using R = __vres<A, B>;                                                                    \
		__vec<typename R::T, R::N> r;                                                              \
		for (int i = 0; i < R::N; i++) r.e[i] = name(typename R::T(__comp(a, i)), typename R::T(__comp(b, i))); \
		return r;                                                                                  \
	}
// For floating types Metal's min and max are fmin and fmax: a NaN argument gives the other
// one (NaN only when both are); integers compare.
template <class T> constexpr bool __msl_nan(const T &x) {
	if constexpr (std::is_integral_v<T>) return false;
	else return x != x;
}
MSL_MAP2(min, __msl_nan(a) ? b : __msl_nan(b) ? a : b < a ? b : a)
MSL_MAP2(max, __msl_nan(a) ? b : __msl_nan(b) ? a : a < b ? b : a)
MSL_MAP2(fmin, __builtin_fminf(float(a), float(b)))
MSL_MAP2(fmax, __builtin_fmaxf(float(a), float(b)))
MSL_MAP2(pow, __builtin_powf(float(a), float(b)))
MSL_MAP2(powr, __builtin_powf(float(a), float(b)))
MSL_MAP2(atan2, __builtin_atan2f(float(a), float(b)))
MSL_MAP2(fmod, __builtin_fmodf(float(a), float(b)))
MSL_MAP2(copysign, __builtin_copysignf(float(a), float(b)))
MSL_MAP2(fdim, __builtin_fdimf(float(a), float(b)))
MSL_MAP2(step, float(b) < float(a) ? 0.0f : 1.0f)

template <class X, class L, class H> inline auto clamp(const X &x, const L &lo, const H &hi) { return min(max(x, lo), hi); }

template <class A, class B, class C> inline auto fma(const A &a, const B &b, const C &c) {
	if constexpr (__vecish<A> || __vecish<B> || __vecish<C>) {
		return a * b + c;
	} else {
		using T = __common<__common<A, B>, C>;
		if constexpr (std::is_same_v<T, float>)
			return __builtin_fmaf(a, b, c);
		else if constexpr (std::is_same_v<T, half>)
			return half(__builtin_fmaf(float(a), float(b), float(c)));
		else
			return T(T(a) * T(b) + T(c));
	}
}
template <class A, class B, class C> inline auto mad(const A &a, const B &b, const C &c) { return fma(a, b, c); }
template <class A, class B, class C> inline auto mix(const A &x, const B &y, const C &t) { return x + (y - x) * t; }
template <class A, class B, class C> inline auto smoothstep(const A &e0, const B &e1, const C &x) {
	auto t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
	return t * t * (3.0f - 2.0f * t);
}

// select(a, b, c): c ? b : a, per component.
template <class A, class B, class C> inline auto select(const A &a, const B &b, const C &c) {
	if constexpr (__vecish<C>) {
		auto va = __tovec(a);
		auto vb = __tovec(b);
		for (int i = 0; i < __vinfo<C>::n; i++)
			if (c[i]) va.e[i] = vb.e[i];
		return va;
	} else {
		return c ? __tovec(b) : __tovec(a);
	}
}

template <class V> requires __vecish<V> inline bool all(const V &v) {
	for (int i = 0; i < __vinfo<V>::n; i++)
		if (!v[i]) return false;
	return true;
}
template <class V> requires __vecish<V> inline bool any(const V &v) {
	for (int i = 0; i < __vinfo<V>::n; i++)
		if (v[i]) return true;
	return false;
}
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }

template <class A, class B> requires(__vecish<A> && __vecish<B>) inline auto dot(const A &a, const B &b) {
	using T = __elem_t<A>;
	T s = T(0);
	for (int i = 0; i < __vinfo<A>::n; i++) s += T(a[i]) * T(b[i]);
	return s;
}
template <class A> requires __vecish<A> inline auto length_squared(const A &a) { return dot(a, a); }
template <class A> requires __vecish<A> inline auto length(const A &a) { return sqrt(dot(a, a)); }
template <class A, class B> requires __vecish<A> inline auto distance(const A &a, const B &b) { return length(a - b); }
template <class A> requires __vecish<A> inline auto normalize(const A &a) { return a * rsqrt(dot(a, a)); }
template <class A, class B> inline auto cross(const A &a, const B &b) {
	auto x = __tovec(a);
	auto y = __tovec(b);
	return decltype(x)(x.y * y.z - x.z * y.y, x.z * y.x - x.x * y.z, x.x * y.y - x.y * y.x);
}

template <class T> requires std::is_integral_v<T> inline T popcount(T x) { return T(__builtin_popcountll((unsigned long long)(std::make_unsigned_t<T>)x)); }
template <class T> requires std::is_integral_v<T> inline T clz(T x) {
	using U = std::make_unsigned_t<T>;
	return x == 0 ? T(sizeof(T) * 8) : T(__builtin_clzll((unsigned long long)(U)x) - (64 - sizeof(T) * 8));
}
template <class T> requires std::is_integral_v<T> inline T ctz(T x) { return x == 0 ? T(sizeof(T) * 8) : T(__builtin_ctzll((unsigned long long)x)); }
template <class T> requires std::is_integral_v<T> inline T mulhi(T a, T b) {
	if constexpr (sizeof(T) == 8)
		return T((__int128(a) * __int128(b)) >> 64);
	else
		return T((int64_t(a) * int64_t(b)) >> (sizeof(T) * 8));
}
inline uint mulhi(uint a, uint b) { return uint((uint64_t(a) * uint64_t(b)) >> 32); }

// fast:: and precise:: are the same functions here: the harness checks logic, not the
// last bit of Metal's fast-math approximations (tests compare with tolerances).
namespace fast {
using metal::abs, metal::exp, metal::exp2, metal::exp10, metal::log, metal::log2, metal::log10, metal::sqrt,
	metal::rsqrt, metal::sin, metal::cos, metal::tan, metal::tanh, metal::sinh, metal::cosh, metal::pow,
	metal::powr, metal::min, metal::max, metal::fmin, metal::fmax, metal::clamp, metal::fabs, metal::floor,
	metal::ceil, metal::round, metal::trunc, metal::normalize, metal::length, metal::distance, metal::atan,
	metal::atan2, metal::fmod, metal::saturate, metal::fract, metal::sign, metal::erf, metal::asin, metal::acos;
}
namespace precise {
using namespace fast;
}

// ---------------------------------------------------------------- synchronisation
inline void threadgroup_barrier(mem_flags = mem_flags::mem_none, std::source_location loc = std::source_location::current()) {
	__msl_barrier("threadgroup_barrier", loc.file_name(), loc.line(), loc.column());
}

namespace __simd {
template <class T> using fn = void (*)(__msl_slot *const *);
template <class T> inline const T &in(__msl_slot *s) { return *static_cast<const T *>(s->in); }
template <class T> inline T &out(__msl_slot *s) { return *static_cast<T *>(s->out); }

// run: every lane publishes its operand and waits; the runtime calls F once all active
// lanes of the SIMD group have arrived at this call site.
template <class R, class T, auto F> inline R run(const T &x, int arg, const char *op, const std::source_location &loc) {
	R r{};
	__msl_slot s{&x, &r, arg};
	__msl_simd_sync(&s, F, op, loc.file_name(), loc.line(), loc.column());
	return r;
}
} // namespace __simd

inline void simdgroup_barrier(mem_flags = mem_flags::mem_none, std::source_location loc = std::source_location::current()) {
	int dummy = 0;
	__simd::run<int, int, +[](__msl_slot *const *) {}>(dummy, 0, "simdgroup_barrier", loc);
}

#define MSL_SIMD_REDUCE(name, init, acc)                                                           \
	template <class T> inline T name(T x, std::source_location loc = std::source_location::current()) { \
		return __simd::run<T, T, +[](__msl_slot *const *L) {                                       \
			T a = init;                                                                            \
			bool first = true;                                                                     \
			for (int i = 0; i < 32; i++)                                                           \
				if (L[i]) {                                                                        \
					const T &v = __simd::in<T>(L[i]);                                              \
					if (first) a = v, first = false;                                               \
					else a = acc;                                                                  \
				}                                                                                  \
			for (int i = 0; i < 32; i++)                                                           \
				if (L[i]) __simd::out<T>(L[i]) = a;                                                \
		}>(x, 0, #name, loc);                                                                      \
	}
MSL_SIMD_REDUCE(simd_sum, T(0), a + v)
MSL_SIMD_REDUCE(simd_product, T(1), a *v)
MSL_SIMD_REDUCE(simd_max, T(0), max(a, v))
MSL_SIMD_REDUCE(simd_min, T(0), min(a, v))
MSL_SIMD_REDUCE(simd_and, T(0), a &v)
MSL_SIMD_REDUCE(simd_or, T(0), a | v)
MSL_SIMD_REDUCE(simd_xor, T(0), a ^ v)

template <class T> inline T simd_prefix_inclusive_sum(T x, std::source_location loc = std::source_location::current()) {
	return __simd::run<T, T, +[](__msl_slot *const *L) {
		T a = T(0);
		for (int i = 0; i < 32; i++)
			if (L[i]) {
				a = a + __simd::in<T>(L[i]);
				__simd::out<T>(L[i]) = a;
			}
	}>(x, 0, "simd_prefix_inclusive_sum", loc);
}
template <class T> inline T simd_prefix_exclusive_sum(T x, std::source_location loc = std::source_location::current()) {
	return __simd::run<T, T, +[](__msl_slot *const *L) {
		T a = T(0);
		for (int i = 0; i < 32; i++)
			if (L[i]) {
				__simd::out<T>(L[i]) = a;
				a = a + __simd::in<T>(L[i]);
			}
	}>(x, 0, "simd_prefix_exclusive_sum", loc);
}
template <class T> inline T simd_prefix_inclusive_product(T x, std::source_location loc = std::source_location::current()) {
	return __simd::run<T, T, +[](__msl_slot *const *L) {
		T a = T(1);
		for (int i = 0; i < 32; i++)
			if (L[i]) {
				a = a * __simd::in<T>(L[i]);
				__simd::out<T>(L[i]) = a;
			}
	}>(x, 0, "simd_prefix_inclusive_product", loc);
}
template <class T> inline T simd_prefix_exclusive_product(T x, std::source_location loc = std::source_location::current()) {
	return __simd::run<T, T, +[](__msl_slot *const *L) {
		T a = T(1);
		for (int i = 0; i < 32; i++)
			if (L[i]) {
				__simd::out<T>(L[i]) = a;
				a = a * __simd::in<T>(L[i]);
			}
	}>(x, 0, "simd_prefix_exclusive_product", loc);
}

// Shuffles: src(i, arg) is the lane lane i reads, or -1 to keep its own value (Metal leaves
// the lanes a shift moves past the end unchanged). Reading a lane that is not active
// (beyond the threadgroup, finished, or in another branch) gives zero: on a GPU it is
// undefined.
#define MSL_SIMD_SHUFFLE(name, srcexpr)                                                            \
	template <class T, class I> inline T name(T x, I arg_, std::source_location loc = std::source_location::current()) { \
		return __simd::run<T, T, +[](__msl_slot *const *L) {                                       \
			for (int i = 0; i < 32; i++)                                                           \
				if (L[i]) {                                                                        \
					int arg = L[i]->arg;                                                           \
					int src = (srcexpr);                                                           \
					if (src < 0)                                                                   \
						__simd::out<T>(L[i]) = __simd::in<T>(L[i]);                                \
					else if (src < 32 && L[src])                                                   \
						__simd::out<T>(L[i]) = __simd::in<T>(L[src]);                              \
					else                                                                           \
						__simd::out<T>(L[i]) = T(0);                                               \
				}                                                                                  \
		}>(x, int(arg_), #name, loc);                                                              \
	}
MSL_SIMD_SHUFFLE(simd_shuffle, arg)
MSL_SIMD_SHUFFLE(simd_broadcast, arg)
MSL_SIMD_SHUFFLE(simd_shuffle_down, i + arg < 32 ? i + arg : -1)
MSL_SIMD_SHUFFLE(simd_shuffle_up, i - arg >= 0 ? i - arg : -1)
MSL_SIMD_SHUFFLE(simd_shuffle_xor, i ^ arg)
MSL_SIMD_SHUFFLE(simd_shuffle_rotate_down, (i + arg) & 31)
MSL_SIMD_SHUFFLE(simd_shuffle_rotate_up, (i - arg) & 31)
MSL_SIMD_SHUFFLE(simd_shuffle_and_fill_down, i + arg < 32 ? i + arg : -1)
MSL_SIMD_SHUFFLE(simd_shuffle_and_fill_up, i - arg >= 0 ? i - arg : -1)

template <class T> inline T simd_broadcast_first(T x, std::source_location loc = std::source_location::current()) {
	return __simd::run<T, T, +[](__msl_slot *const *L) {
		int f = 0;
		while (!L[f]) f++;
		for (int i = 0; i < 32; i++)
			if (L[i]) __simd::out<T>(L[i]) = __simd::in<T>(L[f]);
	}>(x, 0, "simd_broadcast_first", loc);
}
inline bool simd_all(bool x, std::source_location loc = std::source_location::current()) {
	return __simd::run<bool, bool, +[](__msl_slot *const *L) {
		bool a = true;
		for (int i = 0; i < 32; i++)
			if (L[i]) a = a && __simd::in<bool>(L[i]);
		for (int i = 0; i < 32; i++)
			if (L[i]) __simd::out<bool>(L[i]) = a;
	}>(x, 0, "simd_all", loc);
}
inline bool simd_any(bool x, std::source_location loc = std::source_location::current()) {
	return __simd::run<bool, bool, +[](__msl_slot *const *L) {
		bool a = false;
		for (int i = 0; i < 32; i++)
			if (L[i]) a = a || __simd::in<bool>(L[i]);
		for (int i = 0; i < 32; i++)
			if (L[i]) __simd::out<bool>(L[i]) = a;
	}>(x, 0, "simd_any", loc);
}
inline bool simd_is_first(std::source_location loc = std::source_location::current()) {
	int dummy = 0;
	return __simd::run<bool, int, +[](__msl_slot *const *L) {
		int f = 0;
		while (!L[f]) f++;
		for (int i = 0; i < 32; i++)
			if (L[i]) __simd::out<bool>(L[i]) = i == f;
	}>(dummy, 0, "simd_is_first", loc);
}
// simd_vote: the active lanes whose predicate holds, one bit per lane.
struct simd_vote {
	uint64_t v;
	explicit operator uint64_t() const { return v; }
	bool all() const { return v == 0xffffffffull; }
	bool any() const { return v != 0; }
};
inline simd_vote simd_ballot(bool x, std::source_location loc = std::source_location::current()) {
	return __simd::run<simd_vote, bool, +[](__msl_slot *const *L) {
		uint64_t m = 0;
		for (int i = 0; i < 32; i++)
			if (L[i] && __simd::in<bool>(L[i])) m |= 1ull << i;
		for (int i = 0; i < 32; i++)
			if (L[i]) __simd::out<simd_vote>(L[i]).v = m;
	}>(x, 0, "simd_ballot", loc);
}

// ---------------------------------------------------------------- atomics
// Real atomics: threadgroups run on several OS threads at once.
enum memory_order { memory_order_relaxed = __ATOMIC_RELAXED, memory_order_seq_cst = __ATOMIC_SEQ_CST };
template <class T> struct _atomic {
	T v;
};
typedef _atomic<int> atomic_int;
typedef _atomic<uint> atomic_uint;
typedef _atomic<float> atomic_float;
typedef _atomic<bool> atomic_bool;

template <class T> inline T atomic_load_explicit(const _atomic<T> *a, memory_order) { return __atomic_load_n(&a->v, __ATOMIC_SEQ_CST); }
template <class T, class U> inline void atomic_store_explicit(_atomic<T> *a, U x, memory_order) { __atomic_store_n(&a->v, T(x), __ATOMIC_SEQ_CST); }
template <class T, class U> inline T atomic_exchange_explicit(_atomic<T> *a, U x, memory_order) {
	if constexpr (std::is_same_v<T, float>)
		return __builtin_bit_cast(float, __atomic_exchange_n((uint32_t *)&a->v, __builtin_bit_cast(uint32_t, float(x)), __ATOMIC_SEQ_CST));
	else
		return __atomic_exchange_n(&a->v, T(x), __ATOMIC_SEQ_CST);
}
template <class T, class U> inline bool atomic_compare_exchange_weak_explicit(_atomic<T> *a, T *expected, U desired, memory_order, memory_order) {
	if constexpr (std::is_same_v<T, float>)
		return __atomic_compare_exchange_n((uint32_t *)&a->v, (uint32_t *)expected, __builtin_bit_cast(uint32_t, float(desired)), true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	else
		return __atomic_compare_exchange_n(&a->v, expected, T(desired), true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
template <class T, class F> inline T __atomic_rmw(_atomic<T> *a, F f) {
	T old = atomic_load_explicit(a, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(a, &old, f(old), memory_order_relaxed, memory_order_relaxed)) {
	}
	return old;
}
template <class T, class U> inline T atomic_fetch_add_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(o + T(x)); }); }
template <class T, class U> inline T atomic_fetch_sub_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(o - T(x)); }); }
template <class T, class U> inline T atomic_fetch_max_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return o < T(x) ? T(x) : o; }); }
template <class T, class U> inline T atomic_fetch_min_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(x) < o ? T(x) : o; }); }
template <class T, class U> inline T atomic_fetch_and_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(o & T(x)); }); }
template <class T, class U> inline T atomic_fetch_or_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(o | T(x)); }); }
template <class T, class U> inline T atomic_fetch_xor_explicit(_atomic<T> *a, U x, memory_order) { return __atomic_rmw(a, [&](T o) { return T(o ^ T(x)); }); }

// ---------------------------------------------------------------- SIMD-group matrices
// Every lane holds the whole 8×8 matrix (on a GPU each holds two elements): loads, stores
// and products are done by each lane on its own (a lane calling one alone is not detected).
template <class T, int Cols, int Rows = Cols> struct simdgroup_matrix {
	T m[Rows][Cols];
	simdgroup_matrix() = default;
	simdgroup_matrix(T v) {
		for (int r = 0; r < Rows; r++)
			for (int c = 0; c < Cols; c++) m[r][c] = v;
	}
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <class T, int Cols, int Rows = Cols> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
	return simdgroup_matrix<T, Cols, Rows>(v);
}

// simdgroup_load: element (r, c) from src[(origin.y + r) * elements_per_row + origin.x + c],
// or the transpose of that block.
template <class T, int C, int R, class S>
inline void simdgroup_load(simdgroup_matrix<T, C, R> &d, const S *src, ulong elements_per_row = C, ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
	if (!transpose_matrix) {
		for (int r = 0; r < R; r++)
			for (int c = 0; c < C; c++) d.m[r][c] = T(src[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c]);
	} else {
		for (int r = 0; r < R; r++)
			for (int c = 0; c < C; c++) d.m[r][c] = T(src[(matrix_origin.y + c) * elements_per_row + matrix_origin.x + r]);
	}
}

template <class T, int C, int R, class S>
inline void simdgroup_store(const simdgroup_matrix<T, C, R> &a, S *dst, ulong elements_per_row = C, ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			if (!transpose_matrix)
				dst[(matrix_origin.y + r) * elements_per_row + matrix_origin.x + c] = S(a.m[r][c]);
			else
				dst[(matrix_origin.y + c) * elements_per_row + matrix_origin.x + r] = S(a.m[r][c]);
		}
}

// d = a·b + c, accumulated in float whatever the element types. Every lane computes it (the
// lanes hold the same matrices): 8-wide vector arithmetic on its own copies, not checked by
// ASan, costs less than making the lanes meet (a fiber switch each) to compute it once.
typedef float __msl_f8 __attribute__((ext_vector_type(8)));
typedef _Float16 __msl_h8 __attribute__((ext_vector_type(8)));
// Whole rows move as vectors: inserting elements one by one at -O1 goes through memory.
template <class T> __attribute__((no_sanitize("address"))) inline __msl_f8 __msl_row_load(const T *p) {
	if constexpr (std::is_same_v<T, float>) {
		__msl_f8 v;
		__builtin_memcpy(&v, p, sizeof v);
		return v;
	} else if constexpr (std::is_same_v<T, half>) {
		__msl_h8 h;
		__builtin_memcpy(&h, p, sizeof h);
		return __builtin_convertvector(h, __msl_f8);
	} else {
		float f[8];
		for (int j = 0; j < 8; j++) f[j] = float(p[j]);
		return __msl_row_load(f);
	}
}
template <class T> __attribute__((no_sanitize("address"))) inline void __msl_row_store(T *p, __msl_f8 v) {
	if constexpr (std::is_same_v<T, float>) {
		__builtin_memcpy(p, &v, sizeof v);
	} else if constexpr (std::is_same_v<T, half>) {
		__msl_h8 h = __builtin_convertvector(v, __msl_h8);
		__builtin_memcpy(p, &h, sizeof h);
	} else {
		for (int j = 0; j < 8; j++) p[j] = T(v[j]);
	}
}
template <class TD, class TA, class TB, class TC, int M, int N, int K>
__attribute__((no_sanitize("address"))) void simdgroup_multiply_accumulate(simdgroup_matrix<TD, N, M> &d, const simdgroup_matrix<TA, K, M> &a,
									  const simdgroup_matrix<TB, N, K> &b, const simdgroup_matrix<TC, N, M> &c) {
	static_assert(N == 8, "MSL: SIMD-group matrices are 8 wide");
	__msl_f8 brow[K]; // read first: d may be b
	for (int k = 0; k < K; k++) brow[k] = __msl_row_load(b.m[k]);
	for (int i = 0; i < M; i++) {
		__msl_f8 acc = __msl_row_load(c.m[i]); // row i of c is read before row i of d is written
		for (int k = 0; k < K; k++) acc += float(a.m[i][k]) * brow[k];
		__msl_row_store(d.m[i], acc);
	}
}
template <class TD, class TA, class TB, int M, int N, int K>
inline void simdgroup_multiply(simdgroup_matrix<TD, N, M> &d, const simdgroup_matrix<TA, K, M> &a, const simdgroup_matrix<TB, N, K> &b) {
	simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<TD, N, M>(TD(0)));
}

} // namespace metal

// ---------------------------------------------------------------- glue helpers
// Used by the generated code only.
template <class T> inline T *__msl_tg(const void *key) { return static_cast<T *>(__msl_tg_alloc(key, sizeof(T), alignof(T))); }

template <class T> inline int __msl_fc_type() {
	if constexpr (std::is_same_v<T, bool>) return MSL_FC_BOOL;
	else if constexpr (std::is_same_v<T, int>) return MSL_FC_INT;
	else if constexpr (std::is_same_v<T, uint>) return MSL_FC_UINT;
	else if constexpr (std::is_same_v<T, float>) return MSL_FC_FLOAT;
	else if constexpr (std::is_same_v<T, half>) return MSL_FC_HALF;
	else if constexpr (std::is_same_v<T, short>) return MSL_FC_SHORT;
	else if constexpr (std::is_same_v<T, ushort>) return MSL_FC_USHORT;
	else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char>) return MSL_FC_CHAR;
	else if constexpr (std::is_same_v<T, uchar>) return MSL_FC_UCHAR;
	else static_assert(sizeof(T) == 0, "MSL: unsupported function constant type");
}

// The type of parameter I of kernel function type F (the glue takes the types from the
// function, so template kernels need no substitution).
template <class F, size_t I> struct __msl_arg;
template <class... P, size_t I> struct __msl_arg<void (*)(P...), I> {
	using type = __type_pack_element<I, P...>;
};
template <class F, size_t I> using __msl_arg_t = typename __msl_arg<F, I>::type;

// A [[buffer(n)]] parameter: pointers and references bind the address; a value copies it.
template <class T> inline T __msl_bind_buf(const __msl_ctx *c, int n) {
	void *p = c->buf[n];
	if constexpr (std::is_pointer_v<T>) {
		using E = std::remove_pointer_t<T>;
		if constexpr (!std::is_void_v<E>) {
			if ((uintptr_t)p % alignof(E) != 0) __msl_fail("a buffer is bound at an offset not aligned to its element type");
		}
		return static_cast<T>(p);
	} else if constexpr (std::is_reference_v<T>) {
		using E = std::remove_reference_t<T>;
		if ((uintptr_t)p % alignof(E) != 0) __msl_fail("a buffer is bound at an offset not aligned to its type");
		return *static_cast<E *>(p);
	} else {
		return *static_cast<const T *>(p);
	}
}
template <class T> inline T __msl_bind_tg(const __msl_ctx *c, int n) { return static_cast<T>(c->tg[n]); }

// A thread attribute parameter of any width: uint, ushort2, uint3, …
template <class T> inline T __msl_bind_attr(const uint32_t *v) {
	if constexpr (__vinfo<T>::n == 0)
		return T(v[0]);
	else if constexpr (__vinfo<T>::n == 2)
		return T(v[0], v[1]);
	else
		return T(v[0], v[1], v[2]);
}

// ---------------------------------------------------------------- keywords
#define kernel
#define device
#define constant const
#define thread
#define threadgroup
#define threadgroup_imageblock
#define ray_data
#define object_data

#define is_function_constant_defined(name) __msl_fcdef_##name

using namespace metal;

#endif

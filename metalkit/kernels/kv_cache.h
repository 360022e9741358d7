// kv_cache.h: how the attention kernels read a KV layer of each cache type. A reader R has
// R::elem, the layer's unit in device memory, R::key4(c, e), the four values from element e
// (a multiple of 4) as floats, and R::value(c, e), the value of element e. Element e is
// counted as in a plain layer: row·kv_heads·head_dim + head·head_dim + feature.
#pragma once

template <typename T, typename T4>
struct kv_plain {
    typedef T elem;
    static inline float4 key4(device const T *c, ulong e) {
        return float4(*(device const T4 *)(c + e));
    }
    static inline float value(device const T *c, ulong e) {
        return float(c[e]);
    }
};

typedef kv_plain<float, float4> kv_f32;
typedef kv_plain<half, half4> kv_f16;

// Q8_0 blocks (a half scale, 32 int8) of the heads, each a whole number of them: a value
// is expanded as ggml's to_float, int8 × scale. Four values from a multiple of 4 lie in
// one block; blocks are only 2-byte aligned, so the int8 are read one by one.
struct kv_q8_0 {
    typedef uchar elem;
    static inline float4 key4(device const uchar *c, ulong e) {
        device const uchar *b = c + e / 32 * 34;
        const float d = float(*(device const half *)b);
        device const int8_t *q = (device const int8_t *)(b + 2 + e % 32);
        return float4(float(q[0]), float(q[1]), float(q[2]), float(q[3])) * d;
    }
    static inline float value(device const uchar *c, ulong e) {
        device const uchar *b = c + e / 32 * 34;
        return float(((device const int8_t *)(b + 2))[e % 32]) * float(*(device const half *)b);
    }
};

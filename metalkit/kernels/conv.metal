// Conv1DCausal (metalkit/deltanet.go): depthwise causal convolution with its window state.
#include <metal_stdlib>
using namespace metal;

#include "args_attn.h"

// One thread per channel, which owns its column of x, y and the state, so the state is
// updated in place without a barrier: the window (kernel−1 remembered inputs, then the new
// ones) slides through registers, each output summed oldest tap first in float32 as the CPU
// backend does, and the last kernel−1 inputs are left in the state.
template <typename W>
static void conv1d_causal(constant conv1d_causal_args &a, device const float *x, device const W *w,
                          device float *state, device float *y, uint c) {
    if (int(c) >= a.channels) {
        return;
    }
    const int K = a.taps;
    const int ch = a.channels;
    float taps[CONV_MAX_KERNEL];
    float win[CONV_MAX_KERNEL];
    for (int i = 0; i < CONV_MAX_KERNEL; i++) {
        taps[i] = i < K ? float(w[int(c) * K + i]) : 0.0f;
        win[i] = i < K - 1 ? state[i * ch + int(c)] : 0.0f;
    }
    for (int t = 0; t < a.n; t++) {
        win[K - 1] = x[ulong(t) * ulong(ch) + c];
        float sum = 0.0f;
        for (int i = 0; i < CONV_MAX_KERNEL; i++) {
            if (i < K) {
                sum += win[i] * taps[i];
            }
        }
        y[ulong(t) * ulong(ch) + c] = sum;
        for (int i = 0; i + 1 < CONV_MAX_KERNEL; i++) {
            if (i < K - 1) {
                win[i] = win[i + 1];
            }
        }
    }
    for (int i = 0; i < CONV_MAX_KERNEL - 1; i++) {
        if (i < K - 1) {
            state[i * ch + int(c)] = win[i];
        }
    }
}

kernel void conv1d_causal_f32(constant conv1d_causal_args &a [[buffer(0)]],
                              device const float *x [[buffer(1)]],
                              device const float *w [[buffer(2)]],
                              device float *state [[buffer(3)]],
                              device float *y [[buffer(4)]],
                              uint c [[thread_position_in_grid]]) {
    conv1d_causal<float>(a, x, w, state, y, c);
}

kernel void conv1d_causal_f16(constant conv1d_causal_args &a [[buffer(0)]],
                              device const float *x [[buffer(1)]],
                              device const half *w [[buffer(2)]],
                              device float *state [[buffer(3)]],
                              device float *y [[buffer(4)]],
                              uint c [[thread_position_in_grid]]) {
    conv1d_causal<half>(a, x, w, state, y, c);
}

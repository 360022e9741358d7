package qwen3_test

import "testing"

// TestGPTOSSParity covers gpt-oss's layout: biases on q, k, v and o, attention sinks,
// sliding-window layers (window 16) alternating with global ones, YaRN (factor 4 over an
// original context of 128, which seq300 runs past), routed experts with biased router and
// projections, softmax over the chosen experts and the clamped SwiGLU. Ours is within 1e-5
// (median 2.6e-6) of llama.cpp's exact run at every chunk size.
func TestGPTOSSParity(t *testing.T) { parityWithin(t, "tiny-gpt-oss-F32", 2e-5, 5e-6) }

//go:build !amd64 || purego

package cpu

func softmax32(x []float32, scale float32) { softmaxGo(x, scale) }
func swiglu(out, g, u []float32)           { swigluGo(out, g, u) }

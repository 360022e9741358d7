//go:build !amd64 || purego

package quant

// dequantFast has no assembly to run here.
func dequantFast(Type, []byte, []float32) bool { return false }

func dequantF16([]byte, []float32) bool { return false }

func narrowF16([]float32, []uint16) bool { return false }

//go:build !amd64 || purego

package cpu

func asmRowForms() []rowForms { return nil }

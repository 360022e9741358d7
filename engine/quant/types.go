// Package quant holds ggml's tensor storage formats: the type table (block size and bytes
// per block), dequantization bit-identical to ggml's to_float, and dot products of quantized
// rows with activations.
package quant

import "fmt"

// Type is a ggml tensor type, numbered as in GGUF files.
type Type uint32

// The ggml type ids. Numbers are fixed by the GGUF format; gaps are types ggml removed.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// QK_K is the super-block size of the K-quants and i-quants.
const QK_K = 256

type traits struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

// table lists every type a GGUF file may name, so that files with types we cannot compute
// with still parse and report sizes; Supported says which ones we can dequantize. It is an
// array, not a map: the dot products look a type up per row, and a map lookup showed up at
// 7% of a decode profile.
var table = [...]traits{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 4 + 32},
	Q2_K:    {"Q2_K", QK_K, QK_K/16 + QK_K/4 + 2 + 2},
	Q3_K:    {"Q3_K", QK_K, QK_K/8 + QK_K/4 + 12 + 2},
	Q4_K:    {"Q4_K", QK_K, 2 + 2 + 12 + QK_K/2},
	Q5_K:    {"Q5_K", QK_K, 2 + 2 + 12 + QK_K/8 + QK_K/2},
	Q6_K:    {"Q6_K", QK_K, QK_K/2 + QK_K/4 + QK_K/16 + 2},
	Q8_K:    {"Q8_K", QK_K, 4 + QK_K + QK_K/16*2},
	IQ2_XXS: {"IQ2_XXS", QK_K, 2 + QK_K/8*2},
	IQ2_XS:  {"IQ2_XS", QK_K, 2 + QK_K/8*2 + QK_K/32},
	IQ3_XXS: {"IQ3_XXS", QK_K, 2 + QK_K/4 + QK_K/8},
	IQ1_S:   {"IQ1_S", QK_K, 2 + QK_K/8 + QK_K/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", QK_K, 2 + QK_K/4 + QK_K/8 + QK_K/32 + 4},
	IQ2_S:   {"IQ2_S", QK_K, 2 + QK_K/4 + QK_K/16},
	IQ4_XS:  {"IQ4_XS", QK_K, 2 + 2 + QK_K/2 + QK_K/64},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", QK_K, QK_K/8 + QK_K/16 + QK_K/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", QK_K, 2 + (QK_K-4*QK_K/64)/5 + QK_K/64},
	TQ2_0:   {"TQ2_0", QK_K, 2 + QK_K/4},
	MXFP4:   {"MXFP4", 32, 1 + 16},
}

func (t Type) traits() traits {
	if int(t) < len(table) {
		return table[t]
	}
	return traits{}
}

// Known reports whether t is a type GGUF files may contain.
func (t Type) Known() bool { return t.traits().blockSize != 0 }

func (t Type) String() string {
	if tr := t.traits(); tr.blockSize != 0 {
		return tr.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements one block holds (1 for plain types; 0 if unknown).
func (t Type) BlockSize() int { return t.traits().blockSize }

// TypeSize is the number of bytes one block takes.
func (t Type) TypeSize() int { return t.traits().typeSize }

// RowBytes is the storage size of n elements, which must be a multiple of the block size.
func (t Type) RowBytes(n int) int {
	tr := t.traits()
	if tr.blockSize == 0 {
		return 0
	}
	return n / tr.blockSize * tr.typeSize
}

// ParseType maps a type name ("Q4_K", "f16") to its Type.
func ParseType(name string) (Type, error) {
	for t, tr := range table {
		if tr.blockSize != 0 && equalFold(tr.name, name) {
			return Type(t), nil
		}
	}
	return 0, fmt.Errorf("unknown tensor type %q", name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

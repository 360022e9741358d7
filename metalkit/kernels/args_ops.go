package kernels

// Go mirrors of args_ops.h: the same fields in the same order (C's padding fields too),
// packed by encoding/binary exactly as C lays them out (every field is 4 bytes).

// Operations of unary_f32 (UNARY_* in args_ops.h).
const (
	UnarySigmoid  = 0
	UnarySiLU     = 1
	UnarySoftplus = 2
	UnaryScale    = 3
)

// Operations of binary_f32 and bcast_f32 (BINARY_* in args_ops.h).
const (
	BinaryAdd    = 0
	BinaryMul    = 1
	BinarySwiGLU = 2
	BinaryGeGLU  = 3
	// BinaryClampedSwiGLU takes BinaryF32Args' Alpha and Limit.
	BinaryClampedSwiGLU = 4
)

// opsArgs maps each argument struct of args_ops.h by its C name to its Go mirror.
// TestArgLayouts checks both against clang.
var opsArgs = map[string]any{
	"unary_f32_args":        UnaryF32Args{},
	"binary_f32_args":       BinaryF32Args{},
	"bcast_f32_args":        BcastF32Args{},
	"rms_norm_f32_args":     RMSNormF32Args{},
	"l2_norm_f32_args":      L2NormF32Args{},
	"rope_f32_args":         RoPEF32Args{},
	"route_f32_args":        RouteF32Args{},
	"weighted_sum_f32_args": WeightedSumF32Args{},
	"argmax_f32_args":       ArgmaxF32Args{},
	"copy_f32_args":         CopyF32Args{},
}

type UnaryF32Args struct {
	N     int32
	Op    int32
	Scale float32
	Pad   int32
}

type BinaryF32Args struct {
	N, Op        int32
	Alpha, Limit float32
}

type BcastF32Args struct {
	N, D, Op int32
	Pad      int32
}

type RMSNormF32Args struct {
	Rows, D int32
	Eps     float32
	HasW    int32
}

type L2NormF32Args struct {
	Rows, D int32
	Eps     float32
	Pad     int32
}

type RoPEF32Args struct {
	N, Heads, HeadDim, Dims int32
	NeoX                    int32
	Pad0, Pad1, Pad2        int32
}

type RouteF32Args struct {
	N, Experts, K, Norm int32
	MinSum              float32
	Pad0, Pad1, Pad2    int32
}

type WeightedSumF32Args struct {
	N, K, D int32
	Pad     int32
}

type ArgmaxF32Args struct {
	Rows, D    int32
	Pad0, Pad1 int32
}

type CopyF32Args struct {
	Rows, Cols, SrcStride, DstStride int32
}

package kernels

// matmulArgs maps each argument struct of args_matmul.h by its C name to its Go mirror: the
// same fields in the same order (C padding fields are Go blank fields), whose
// encoding/binary layout is the C layout. TestArgLayouts checks both against clang.
var matmulArgs = map[string]any{
	"mul_mv_args":    MulMvArgs{},
	"mul_mm_args":    MulMmArgs{},
	"mul_mv_id_args": MulMvIdArgs{},
	"mul_mm_id_args": MulMmIdArgs{},
	"get_rows_args":  GetRowsArgs{},
}

// MulMvArgs are the arguments of the mat-vec kernels mul_mv_<type>_f32.
type MulMvArgs struct {
	Rows     int32  // output rows (weight rows)
	Cols     int32  // inputs per row
	N        int32  // tokens
	Lanes    int32  // SIMD lanes per row (a power of two, 1…32)
	RowBytes uint64 // bytes of one weight row
}

// MulMmArgs are the arguments of the tiled mat-mat kernels mul_mm_<type>_f32.
type MulMmArgs struct {
	Rows     int32
	Cols     int32
	N        int32
	Pad0     int32
	RowBytes uint64
}

// MulMvIdArgs are the arguments of the expert mat-vec kernels mul_mv_id_<type>_f32: one
// threadgroup row per (token, slot) pair, the expert picked by the ids tensor.
type MulMvIdArgs struct {
	Rows        int32
	Cols        int32
	N           int32 // tokens
	Lanes       int32
	K           int32 // slots per token
	Experts     int32
	XPerSlot    int32 // 1: x is [n, k, cols]; 0: x is [n, cols], shared by the slots
	Cached      int32 // 1: expert e is at w + where[e]·ExpertBytes (an expert cache arena)
	T0          int32 // the tokens [T0, T1) and slots [S0, S1) this dispatch computes
	T1          int32
	S0          int32
	S1          int32
	RowBytes    uint64
	ExpertBytes uint64 // bytes of one expert's matrix (of a cache slot when cached)
}

// MulMmIdArgs are the arguments of the expert mat-mat kernels mul_mm_id_<type>_f32: one
// threadgroup per tile of rows of one expert, over the pairs routed to it.
type MulMmIdArgs struct {
	Rows        int32
	Cols        int32
	N           int32 // tokens
	K           int32 // slots per token
	Experts     int32
	XPerSlot    int32 // 1: x is [n, k, cols]; 0: x is [n, cols], shared by the slots
	Cached      int32 // as in MulMvIdArgs
	T0          int32
	T1          int32
	S0          int32
	S1          int32
	Pad0        int32
	RowBytes    uint64
	ExpertBytes uint64 // bytes of one expert's matrix (of a cache slot when cached)
}

// GetRowsArgs are the arguments of get_rows_<type>.
type GetRowsArgs struct {
	Cols     int32
	N        int32
	Rows     int32 // rows in the table: ids at or beyond it yield NaN rows
	Pad0     int32
	RowBytes uint64
}

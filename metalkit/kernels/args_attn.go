package kernels

// Go mirrors of the structs in args_attn.h, field for field: their encoding/binary packing
// is the C layout.

// attnArgs maps each argument struct of args_attn.h (KV cache, attention, convolution and
// DeltaNet) by its C name to its Go mirror. TestArgLayouts checks both against clang.
var attnArgs = map[string]any{
	"kv_store_args":          KVStoreArgs{},
	"kv_load_args":           KVLoadArgs{},
	"kv_rows_args":           KVRowsArgs{},
	"attn_decode_args":       AttnDecodeArgs{},
	"attn_merge_args":        AttnMergeArgs{},
	"attn_decode_batch_args": AttnDecodeBatchArgs{},
	"attn_prefill_args":      AttnPrefillArgs{},
	"attn_sinks_args":        AttnSinksArgs{},
	"conv1d_causal_args":     Conv1DCausalArgs{},
	"deltanet_args":          DeltaNetArgs{},
}

// Constants of args_attn.h the host sizes dispatches with.
const (
	AttnDecodeThreads  = 128
	AttnMaxGroup       = 8
	AttnBatchMaxSeqs   = 32
	AttnPrefillQueries = 2
	AttnMaxHeadDim     = 256
	ConvMaxKernel      = 8
	ConvThreads        = 128
	DNThreads          = 128
	DNTokenRows        = 4
	DNChunkRows        = 8
	DNMaxChunk         = 16
	DNMaxDK            = 256
)

type KVStoreArgs struct {
	N, Row, Pos0, BlockSize int32
	HeadDim, RotK, RotV     int32
	ScaleK, ScaleV          float32
}

type KVLoadArgs struct {
	N, Row, Pos0, BlockSize int32
	HeadDim, RotK, RotV     int32
	ScaleK, ScaleV          float32
}

type KVRowsArgs struct {
	Rows, Len, Rot int32
	Scale          float32
	Round          int32
}

type AttnDecodeArgs struct {
	Heads, KVHeads, HeadDim, Group, TGHeads int32
	Positions, Split, NSplit, BlockSize     int32
	Scale                                   float32
}

type AttnMergeArgs struct {
	Heads, HeadDim, NSplit, Pad0 int32
}

type AttnDecodeBatchArgs struct {
	D            AttnDecodeArgs
	Seqs, Splits int32
	QOff         [AttnBatchMaxSeqs]int32
	OutOff       [AttnBatchMaxSeqs]int32
	Positions    [AttnBatchMaxSeqs]int32
	Table0       [AttnBatchMaxSeqs]int32
	Split0       [AttnBatchMaxSeqs]int32
}

type AttnPrefillArgs struct {
	N, Heads, KVHeads, HeadDim, Group, TGHeads, Pos0, BlockSize int32
	Scale                                                       float32
}

type AttnSinksArgs struct {
	N, Heads, KVHeads, HeadDim, Pos0, BlockSize, Window, HasSinks int32
	Scale                                                         float32
}

type Conv1DCausalArgs struct {
	N, Channels, Taps, Pad0 int32
}

type DeltaNetArgs struct {
	N, KHeads, VHeads, DK, DV, Chunk int32
	Scale                            float32
	Pad0                             int32
}

package kernels

// ArgStructs returns the Go mirror of every kernel argument struct, by its C name
// (rms_norm_args → RMSNormArgs{}). Each area keeps its own map (opsArgs, matmulArgs,
// attnArgs) in its args_<area>.go so that the helpers adding structs do not edit one file.
func ArgStructs() map[string]any {
	all := map[string]any{}
	for _, m := range []map[string]any{opsArgs, matmulArgs, attnArgs} {
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// ArgHeaders are the headers that declare argument structs.
var ArgHeaders = []string{"args_ops.h", "args_matmul.h", "args_attn.h"}

// Header returns the named header of the package with our includes inlined, as Source
// inlines them.
func Header(name string) (string, error) {
	return buildFile(files, name)
}

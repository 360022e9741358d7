package kernels

// matmulArgs maps each argument struct of args_matmul.h (matrix products and embeddings) by its C name to its Go
// mirror: a struct with the same fields in the same order (names equal ignoring case and
// underscores; C padding fields are Go blank fields), whose encoding/binary layout is the
// C layout. TestArgLayouts checks both against clang.
var matmulArgs = map[string]any{}

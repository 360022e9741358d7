package kernels

// opsArgs maps each argument struct of args_ops.h (element-wise operations, norms, RoPE, routing) by its C name to its Go
// mirror: a struct with the same fields in the same order (names equal ignoring case and
// underscores; C padding fields are Go blank fields), whose encoding/binary layout is the
// C layout. TestArgLayouts checks both against clang.
var opsArgs = map[string]any{}

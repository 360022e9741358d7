// args.h: the argument structs of every kernel, one per kernel, named <kernel>_args, shared
// with the host through the Go mirrors in args*.go (a test checks the layouts agree).
// Only fixed-size fields (int32_t, uint32_t, float, uint64_t), padding made explicit.
#pragma once

#include "common.h"
#include "args_ops.h"
#include "args_matmul.h"
#include "args_attn.h"

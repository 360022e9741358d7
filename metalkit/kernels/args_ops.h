// args_ops.h: argument structs of the element-wise operations, norms, RoPE, routing, … kernels.
#pragma once

#include "common.h"

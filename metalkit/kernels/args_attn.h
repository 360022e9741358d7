// args_attn.h: argument structs of the KV cache, attention, convolution, DeltaNet kernels.
#pragma once

#include "common.h"

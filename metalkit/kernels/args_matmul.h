// args_matmul.h: argument structs of the matrix-vector and matrix-matrix products, embeddings kernels.
#pragma once

#include "common.h"

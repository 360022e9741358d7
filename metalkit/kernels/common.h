// common.h: helpers shared by the kernels, and the block structs of the quantised formats.
#pragma once

#include <metal_stdlib>
using namespace metal;

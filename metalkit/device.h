// The C boundary of metalkit: plain structs and functions, Objective-C stays in device.m.
#ifndef METALKIT_DEVICE_H
#define METALKIT_DEVICE_H

#include <stdint.h>

typedef struct {
	char name[256];
	uint64_t recommended_max_working_set;
	uint64_t current_allocated;
	int32_t unified_memory;
} rl_device_info;

// rl_device_default fills out with the default Metal device's facts. It returns 0 on
// success and -1 when there is no Metal device.
int rl_device_default(rl_device_info *out);

#endif

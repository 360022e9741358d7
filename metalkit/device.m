//go:build darwin && cgo

#import <Metal/Metal.h>
#include <string.h>
#include "device.h"

int rl_device_default(rl_device_info *out) {
	@autoreleasepool {
		id<MTLDevice> dev = MTLCreateSystemDefaultDevice();
		if (dev == nil) {
			return -1;
		}
		memset(out, 0, sizeof(*out));
		const char *name = [[dev name] UTF8String];
		if (name != NULL) {
			strncpy(out->name, name, sizeof(out->name) - 1);
		}
		out->recommended_max_working_set = (uint64_t)[dev recommendedMaxWorkingSetSize];
		out->current_allocated = (uint64_t)[dev currentAllocatedSize];
		out->unified_memory = [dev hasUnifiedMemory] ? 1 : 0;
		return 0;
	}
}

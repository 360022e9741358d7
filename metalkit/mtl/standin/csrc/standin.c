// A stand-in for the Objective-C runtime and Metal, for measuring and testing the Metal
// device's host side on Linux (package standin). It exports the C functions the device
// calls by the names Apple's libraries export them; objc_msgSend does what the device needs
// of each message it knows (buffers have storage, contents and length; a command buffer's
// status is completed) and returns the receiver for the rest, so alloc, init, retain,
// commandBuffer and computeCommandEncoder give a usable object back.
//
// objc_msgSend reads its arguments as the arm64 ABI passes them for the declared types:
// integers and pointers in order, an MTLSize (24 bytes) as a pointer to a copy. It records
// the last message's words, and for dispatchThreadgroups:threadsPerThreadgroup: the two
// sizes read through those pointers, for the layout test.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uintptr_t word;

enum kind {
	K_OTHER,
	K_NEW_BUFFER,
	K_NEW_BUFFER_NOCOPY,
	K_CONTENTS,
	K_LENGTH,
	K_MAX_BUFFER,
	K_MAX_THREADS,
	K_SIMD_WIDTH,
	K_STATUS,
	K_RESPONDS,
	K_UTF8,
	K_RELEASE,
	K_DISPATCH,
	K_SET_BYTES,
	K_NEW_LIBRARY,
	K_COMMAND_BUFFER,
	K_COMPUTE_ENCODER,
	K_WORKING_SET,
	K_NEW_PIPELINE,
	K_INIT,
	K_DRAIN,
	K_SUPPORTS_FAMILY,
	K_STATIC_SHARED,
};

static const struct { const char *name; enum kind kind; } known[] = {
	{"newBufferWithLength:options:", K_NEW_BUFFER},
	{"newBufferWithBytesNoCopy:length:options:deallocator:", K_NEW_BUFFER_NOCOPY},
	{"contents", K_CONTENTS},
	{"length", K_LENGTH},
	{"maxBufferLength", K_MAX_BUFFER},
	{"maxTotalThreadsPerThreadgroup", K_MAX_THREADS},
	{"threadExecutionWidth", K_SIMD_WIDTH},
	{"status", K_STATUS},
	{"respondsToSelector:", K_RESPONDS},
	{"UTF8String", K_UTF8},
	{"release", K_RELEASE},
	{"dispatchThreadgroups:threadsPerThreadgroup:", K_DISPATCH},
	{"setBytes:length:atIndex:", K_SET_BYTES},
	{"newLibraryWithSource:options:error:", K_NEW_LIBRARY},
	{"commandBuffer", K_COMMAND_BUFFER},
	{"computeCommandEncoder", K_COMPUTE_ENCODER},
	{"recommendedMaxWorkingSetSize", K_WORKING_SET},
	{"newComputePipelineStateWithFunction:error:", K_NEW_PIPELINE},
	{"init", K_INIT},
	{"drain", K_DRAIN},
	{"supportsFamily:", K_SUPPORTS_FAMILY},
	{"staticThreadgroupMemoryLength", K_STATIC_SHARED},
};

// A selector: its name, what the stand-in does for it, how many times it was sent.
struct selector {
	char name[96];
	enum kind kind;
	uint64_t count;
};

#define MAX_SELECTORS 256
static struct selector selectors[MAX_SELECTORS];
static int nselectors;

// Objects the stand-in makes. Every other receiver (classes, the device, command buffers)
// is a generic object.
enum { TAG_OBJECT = 0x6f626a, TAG_BUFFER = 0x627566 };
struct object {
	uint64_t tag;
	void *contents;
	uint64_t length;
	int owned;
};

static struct object device = {TAG_OBJECT};
static struct object *pool_class; // NSAutoreleasePool: [[NSAutoreleasePool alloc] init] pushes a pool, drain pops it
static struct object classes[64];
static char class_names[64][64];
static int nclasses;

// What the tests read.
uint64_t standin_messages;        // messages sent
uint64_t standin_outside_pool;    // messages sent on a thread with no autorelease pool pushed
uint64_t standin_autoreleased;    // objects handed back autoreleased (commandBuffer, computeCommandEncoder)
uint64_t standin_pool_errors;     // pops of a pool that is not the thread's innermost
uint64_t standin_buffers;         // buffers alive
word standin_last[8];             // the last message's words (of the watched selector, if one is)
word standin_watch;               // the selector whose messages standin_last records; 0: all
word standin_sizes[6];            // the two MTLSize of the last dispatch, read through their pointers
word standin_bytes[4];            // the first 32 bytes of the last setBytes, read through its pointer
int standin_apple_family;         // 0: every GPU family; else the highest MTLGPUFamilyApple supported (Metal3 from 1007)
int standin_fail_library;         // newLibraryWithSource: fails, writing an NSError to *error
int standin_read_sizes;           // dispatches read their sizes through the MTLSize pointers

static __thread int pool_depth;

static char utf8_name[] = "Stand-in GPU";

word sel_registerName(const char *name) {
	for (int i = 0; i < nselectors; i++) {
		if (strcmp(selectors[i].name, name) == 0) {
			return (word)&selectors[i];
		}
	}
	if (nselectors == MAX_SELECTORS || strlen(name) >= sizeof selectors[0].name) {
		abort();
	}
	struct selector *s = &selectors[nselectors++];
	strcpy(s->name, name);
	s->kind = K_OTHER;
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
		if (strcmp(known[i].name, name) == 0) {
			s->kind = known[i].kind;
		}
	}
	return (word)s;
}

word objc_getClass(const char *name) {
	for (int i = 0; i < nclasses; i++) {
		if (strcmp(class_names[i], name) == 0) {
			return (word)&classes[i];
		}
	}
	if (nclasses == 64 || strlen(name) >= 64) {
		abort();
	}
	strcpy(class_names[nclasses], name);
	classes[nclasses].tag = TAG_OBJECT;
	if (strcmp(name, "NSAutoreleasePool") == 0) {
		pool_class = &classes[nclasses];
	}
	return (word)&classes[nclasses++];
}

word MTLCreateSystemDefaultDevice(void) { return (word)&device; }

word objc_autoreleasePoolPush(void) { return (word)++pool_depth; }

void objc_autoreleasePoolPop(word token) {
	if (token != (word)pool_depth) {
		__atomic_add_fetch(&standin_pool_errors, 1, __ATOMIC_RELAXED);
	}
	if (pool_depth > 0) {
		pool_depth--;
	}
}

static word new_buffer(void *contents, uint64_t length, int owned) {
	struct object *b = calloc(1, sizeof *b);
	b->tag = TAG_BUFFER;
	b->contents = contents;
	b->length = length;
	b->owned = owned;
	__atomic_add_fetch(&standin_buffers, 1, __ATOMIC_RELAXED);
	return (word)b;
}

word objc_msgSend(word self, word cmd, word a, word b, word c, word d) {
	struct selector *s = (struct selector *)cmd;
	struct object *o = (struct object *)self;
	__atomic_add_fetch(&standin_messages, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->count, 1, __ATOMIC_RELAXED);
	if (s->kind == K_INIT && o == pool_class) {
		pool_depth++;
		return self;
	}
	if (s->kind == K_DRAIN) {
		pool_depth--;
		return 0;
	}
	if (pool_depth == 0) {
		__atomic_add_fetch(&standin_outside_pool, 1, __ATOMIC_RELAXED);
	}
	if (standin_watch == 0 || standin_watch == cmd) {
		standin_last[0] = self;
		standin_last[1] = cmd;
		standin_last[2] = a;
		standin_last[3] = b;
		standin_last[4] = c;
		standin_last[5] = d;
	}
	switch (s->kind) {
	case K_NEW_BUFFER:
		return new_buffer(calloc(1, a ? a : 1), a, 1);
	case K_NEW_BUFFER_NOCOPY:
		return new_buffer((void *)a, b, 0);
	case K_CONTENTS:
		return (word)o->contents;
	case K_LENGTH:
		return o->length;
	case K_MAX_BUFFER:
		return (word)1 << 35;
	case K_WORKING_SET:
		return (word)16 << 30;
	case K_MAX_THREADS:
		return 1024;
	case K_SIMD_WIDTH:
		return 32;
	case K_STATUS:
		return 4; // MTLCommandBufferStatusCompleted
	case K_RESPONDS:
		return 1;
	case K_SUPPORTS_FAMILY:
		if (standin_apple_family == 0) {
			return 1;
		}
		if (a == 5001) { // MTLGPUFamilyMetal3
			return standin_apple_family >= 1007;
		}
		return a >= 1001 && a <= (word)standin_apple_family;
	case K_STATIC_SHARED:
		return 0;
	case K_UTF8:
		return (word)utf8_name;
	case K_RELEASE:
		if (o->tag == TAG_BUFFER) {
			if (o->owned) {
				free(o->contents);
			}
			o->tag = 0;
			free(o);
			__atomic_sub_fetch(&standin_buffers, 1, __ATOMIC_RELAXED);
		}
		return 0;
	case K_DISPATCH:
		if (!standin_read_sizes) {
			return 0;
		}
		memcpy(&standin_sizes[0], (void *)a, 3 * sizeof(word));
		memcpy(&standin_sizes[3], (void *)b, 3 * sizeof(word));
		return 0;
	case K_SET_BYTES:
		memset(standin_bytes, 0, sizeof standin_bytes);
		memcpy(standin_bytes, (void *)a, b < sizeof standin_bytes ? b : sizeof standin_bytes);
		return 0;
	case K_NEW_LIBRARY:
		if (standin_fail_library) {
			*(word *)c = (word)&device; // an NSError: any object
			return 0;
		}
		return self;
	case K_NEW_PIPELINE: {
		// A pipeline of its own, so that the device's skipping of a pipeline already set
		// sees distinct pipelines as a GPU's would.
		struct object *p = calloc(1, sizeof *p);
		p->tag = TAG_OBJECT;
		return (word)p;
	}
	case K_COMMAND_BUFFER:
	case K_COMPUTE_ENCODER:
		__atomic_add_fetch(&standin_autoreleased, 1, __ATOMIC_RELAXED);
		return self;
	default:
		return self;
	}
}

// standin_count is how many times the selector named name was sent.
uint64_t standin_count(const char *name) {
	for (int i = 0; i < nselectors; i++) {
		if (strcmp(selectors[i].name, name) == 0) {
			return selectors[i].count;
		}
	}
	return 0;
}

// standin_reset zeroes the counts.
void standin_reset(void) {
	for (int i = 0; i < nselectors; i++) {
		selectors[i].count = 0;
	}
	standin_messages = standin_outside_pool = standin_autoreleased = standin_pool_errors = 0;
}

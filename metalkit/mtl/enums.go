package mtl

// Metal and Foundation enumeration values we pass or read, as Apple publishes them (metal-cpp,
// Apple's C++ mirror of the Objective-C headers: Metal/MTLDataType.hpp, MTLLibrary.hpp,
// MTLCommandBuffer.hpp, MTLResource.hpp, Foundation/NSString.hpp). NSUInteger enums are
// uint here, NSInteger enums int, matching the argument types in msg.go.

// MTLDataType of a function constant's value.
const (
	dataTypeFloat uint = 3
	dataTypeInt   uint = 29
	dataTypeUInt  uint = 33
	dataTypeBool  uint = 53
)

// MTLLanguageVersion: (major << 16) | minor.
const languageVersion3_0 uint = 3 << 16 // minor 0

// MTLGPUFamily values the device must support (Metal/MTLDevice.hpp): Apple7 is the M1's
// family (SIMD-group matrices, 32 KiB of threadgroup memory); Metal3 the Metal 3 feature set.
const (
	gpuFamilyApple7 int = 1007
	gpuFamilyMetal3 int = 5001
)

// MTLMathMode and MTLMathFloatingPointFunctions (MTLCompileOptions, macOS 15 and later).
const (
	mathModeSafe                      int = 0
	mathFloatingPointFunctionsPrecise int = 1
)

// MTLResourceOptions for buffers: shared storage (CPU and GPU see the same memory on Apple
// Silicon), default CPU cache mode, default (tracked) hazard tracking; all three are zero.
const resourceStorageModeShared uint = 0

// MTLCommandBufferStatus.
const (
	statusCompleted uint = 4
	statusError     uint = 5
)

// NSUTF8StringEncoding.
const utf8StringEncoding uint = 4

// MTLCommandBufferError codes, by name, for error messages. OutOfMemory is the one the
// backend acts on (device.ErrOutOfMemory).
const commandBufferErrorOutOfMemory = 8

var commandBufferErrors = map[int64]string{
	0:  "None",
	1:  "Internal",
	2:  "Timeout",
	3:  "PageFault",
	4:  "AccessRevoked",
	7:  "NotPermitted",
	8:  "OutOfMemory",
	9:  "InvalidResource",
	10: "Memoryless",
	11: "DeviceRemoved",
	12: "StackOverflow",
}

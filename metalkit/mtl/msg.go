package mtl

import (
	"reflect"
	"sync"
	"unsafe"
)

// Every Objective-C message the Metal device sends is declared here, once, with the Go types
// of its result and arguments; the device calls these declarations (msgN.send, msg_call.go)
// and nothing else sends a message. A wrong selector or argument type fails only at run time
// on a Mac, so TestSelectors (on Linux) checks each declaration against Apple's published
// signature in testdata/selectors.txt, and checks that no other file sends a message.
//
// The Go types stand for Objective-C types as the arm64 C ABI passes them:
//
//	id            an object (@)                 uint    NSUInteger (Q)
//	*id           an out-parameter NSError ** (^@)  int     NSInteger (q)
//	sel           a selector (:)                uint64  uint64_t (Q)
//	block         a block, always nil here (@?) bool    BOOL on arm64 (B)
//	void          no result (v)                 *byte   a C string argument, const char * (r*)
//	unsafe.Pointer  void * (^v)                 string  a C string result, copied (r*)
//	*mtlSize      MTLSize ({MTLSize=QQQ}), which arm64 passes as a pointer to a copy
//	              (msg_call.go)
//	nsRange       NSRange ({_NSRange=QQ}), passed in two registers
//	*uint         an array of NSUInteger (^Q)   *id     also an array of objects (^@)

// id is an Objective-C object pointer (objc.ID on darwin); 0 is nil.
type id uintptr

// sel is a registered selector (objc.SEL).
type sel uintptr

// block is an Objective-C block pointer; we pass only nil.
type block uintptr

// void is the result of a message that returns nothing.
type void struct{}

// Receivers. Each class we message by name, and each message, in one table.
var (
	classNSString                  = newClass("NSString")
	classMTLCompileOptions         = newClass("MTLCompileOptions")
	classMTLFunctionConstantValues = newClass("MTLFunctionConstantValues")
	classMPSMatrixDescriptor       = newClass("MPSMatrixDescriptor")
	classMPSMatrix                 = newClass("MPSMatrix")
	classMPSMatrixMultiplication   = newClass("MPSMatrixMultiplication")
)

var (
	// NSObject
	msgAlloc              = newMsg0[id]("alloc")
	msgInit               = newMsg0[id]("init")
	msgRelease            = newMsg0[void]("release")
	msgRetain             = newMsg0[id]("retain")
	msgRespondsToSelector = newMsg1[bool, sel]("respondsToSelector:")

	// NSString
	msgInitWithCStringEncoding = newMsg2[id, *byte, uint]("initWithCString:encoding:")
	msgUTF8String              = newMsg0[string]("UTF8String")

	// NSError
	msgCode                 = newMsg0[int]("code")
	msgDomain               = newMsg0[id]("domain")
	msgLocalizedDescription = newMsg0[id]("localizedDescription")

	// MTLDevice
	msgName                         = newMsg0[id]("name")
	msgRecommendedMaxWorkingSetSize = newMsg0[uint64]("recommendedMaxWorkingSetSize")
	msgCurrentAllocatedSize         = newMsg0[uint]("currentAllocatedSize")
	msgHasUnifiedMemory             = newMsg0[bool]("hasUnifiedMemory")
	msgMaxBufferLength              = newMsg0[uint]("maxBufferLength")
	msgSupportsFamily               = newMsg1[bool, int]("supportsFamily:")
	msgNewCommandQueue              = newMsg0[id]("newCommandQueue")
	msgNewBufferWithLength          = newMsg2[id, uint, uint]("newBufferWithLength:options:")
	msgNewBufferWithBytesNoCopy     = newMsg4[id, unsafe.Pointer, uint, uint, block]("newBufferWithBytesNoCopy:length:options:deallocator:")
	msgNewLibraryWithSource         = newMsg3[id, id, id, *id]("newLibraryWithSource:options:error:")
	msgNewComputePipelineState      = newMsg2[id, id, *id]("newComputePipelineStateWithFunction:error:")

	// MTLCompileOptions
	msgSetFastMathEnabled             = newMsg1[void, bool]("setFastMathEnabled:")
	msgSetMathMode                    = newMsg1[void, int]("setMathMode:")
	msgSetMathFloatingPointFunctions  = newMsg1[void, int]("setMathFloatingPointFunctions:")
	msgSetLanguageVersion             = newMsg1[void, uint]("setLanguageVersion:")
	msgNewFunctionWithNameConstValues = newMsg3[id, id, id, *id]("newFunctionWithName:constantValues:error:")

	// MTLFunctionConstantValues
	msgSetConstantValue = newMsg3[void, unsafe.Pointer, uint, uint]("setConstantValue:type:atIndex:")

	// MTLComputePipelineState
	msgMaxTotalThreadsPerThreadgroup = newMsg0[uint]("maxTotalThreadsPerThreadgroup")
	msgThreadExecutionWidth          = newMsg0[uint]("threadExecutionWidth")
	msgStaticThreadgroupMemoryLength = newMsg0[uint]("staticThreadgroupMemoryLength")

	// MTLBuffer
	msgContents = newMsg0[unsafe.Pointer]("contents")
	msgLength   = newMsg0[uint]("length")

	// MTLCommandQueue, MTLCommandBuffer, MTLCommandEncoder
	msgCommandBuffer         = newMsg0[id]("commandBuffer")
	msgComputeCommandEncoder = newMsg0[id]("computeCommandEncoder")
	msgCommit                = newMsg0[void]("commit")
	msgWaitUntilCompleted    = newMsg0[void]("waitUntilCompleted")
	msgStatus                = newMsg0[uint]("status")
	msgError                 = newMsg0[id]("error")
	msgEndEncoding           = newMsg0[void]("endEncoding")

	// MTLComputeCommandEncoder
	msgSetComputePipelineState    = newMsg1[void, id]("setComputePipelineState:")
	msgSetBuffer                  = newMsg3[void, id, uint, uint]("setBuffer:offset:atIndex:")
	msgSetBuffers                 = newMsg3[void, *id, *uint, nsRange]("setBuffers:offsets:withRange:")
	msgSetBytes                   = newMsg3[void, unsafe.Pointer, uint, uint]("setBytes:length:atIndex:")
	msgSetThreadgroupMemoryLength = newMsg2[void, uint, uint]("setThreadgroupMemoryLength:atIndex:")
	msgDispatchThreadgroups       = newMsg2[void, *mtlSize, *mtlSize]("dispatchThreadgroups:threadsPerThreadgroup:")

	// MetalPerformanceShaders: MPSMatrixDescriptor (a class method), MPSMatrix,
	// MPSMatrixMultiplication (mps.go)
	msgMatrixDescriptor           = newMsg4[id, uint, uint, uint, uint32]("matrixDescriptorWithRows:columns:rowBytes:dataType:")
	msgInitWithBufferOffsetDesc   = newMsg3[id, id, uint, id]("initWithBuffer:offset:descriptor:")
	msgInitMatrixMultiplication   = newMsg8[id, id, bool, bool, uint, uint, uint, float64, float64]("initWithDevice:transposeLeft:transposeRight:resultRows:resultColumns:interiorColumns:alpha:beta:")
	msgEncodeMatrixMultiplication = newMsg4[void, id, id, id, id]("encodeToCommandBuffer:leftMatrix:rightMatrix:resultMatrix:")
)

// signature is a declared message as the selector check reads it.
type signature struct {
	Selector string
	Result   reflect.Type
	Args     []reflect.Type
}

type message interface{ signature() signature }

// messages and classes hold every declaration, in declaration order.
var (
	messages []message
	classes  []*class
)

// class is an Objective-C class looked up by name on first use.
type class struct {
	name string
	once sync.Once
	id   id
}

func newClass(name string) *class {
	c := &class{name: name}
	classes = append(classes, c)
	return c
}

// msgBase is what every declared message has: its selector's name and the registered
// selector, set on first use (msg_call.go).
type msgBase struct {
	name string
	once sync.Once
	sel  sel
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

type msg0[R res] struct{ msgBase }

type msg1[R res, A arg] struct{ msgBase }

type msg2[R res, A, B arg] struct{ msgBase }

type msg3[R res, A, B, C arg] struct{ msgBase }

type msg4[R res, A, B, C, D arg] struct{ msgBase }

// msg8 is the one eight-argument message, and the one with floating-point arguments
// (MPSMatrixMultiplication's initialiser): objc_msgSend bound to its Go signature.
type msg8[R, A, B, C, D, E, F, G, H any] struct {
	msgBase
	bind sync.Once
	fn   func(id, sel, A, B, C, D, E, F, G, H) R
}

func newMsg0[R res](name string) *msg0[R] {
	m := &msg0[R]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func newMsg1[R res, A arg](name string) *msg1[R, A] {
	m := &msg1[R, A]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func newMsg2[R res, A, B arg](name string) *msg2[R, A, B] {
	m := &msg2[R, A, B]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func newMsg3[R res, A, B, C arg](name string) *msg3[R, A, B, C] {
	m := &msg3[R, A, B, C]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func newMsg4[R res, A, B, C, D arg](name string) *msg4[R, A, B, C, D] {
	m := &msg4[R, A, B, C, D]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func newMsg8[R, A, B, C, D, E, F, G, H any](name string) *msg8[R, A, B, C, D, E, F, G, H] {
	m := &msg8[R, A, B, C, D, E, F, G, H]{msgBase: msgBase{name: name}}
	messages = append(messages, m)
	return m
}

func (m *msg0[R]) signature() signature {
	return signature{m.name, typeOf[R](), nil}
}

func (m *msg1[R, A]) signature() signature {
	return signature{m.name, typeOf[R](), []reflect.Type{typeOf[A]()}}
}

func (m *msg2[R, A, B]) signature() signature {
	return signature{m.name, typeOf[R](), []reflect.Type{typeOf[A](), typeOf[B]()}}
}

func (m *msg3[R, A, B, C]) signature() signature {
	return signature{m.name, typeOf[R](), []reflect.Type{typeOf[A](), typeOf[B](), typeOf[C]()}}
}

func (m *msg4[R, A, B, C, D]) signature() signature {
	return signature{m.name, typeOf[R](), []reflect.Type{typeOf[A](), typeOf[B](), typeOf[C](), typeOf[D]()}}
}

func (m *msg8[R, A, B, C, D, E, F, G, H]) signature() signature {
	return signature{m.name, typeOf[R](), []reflect.Type{typeOf[A](), typeOf[B](), typeOf[C](), typeOf[D](), typeOf[E](), typeOf[F](), typeOf[G](), typeOf[H]()}}
}

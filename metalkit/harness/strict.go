package harness

import (
	"context"
	_ "embed"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The strict check: the harness compiles the kernels as C++20 with address spaces as
// nothing and templates for MSL's overloaded functions, so that it can run them; Apple's
// compiler is stricter. CheckStrict compiles a kernel translation unit closer to what
// Apple's compiler sees (cxx/msl14.h): C++14, as Metal 3.0 is; device, constant and
// threadgroup as distinct address spaces; Metal's overload sets for min, max, clamp and the
// math functions; no standard library. It only compiles (clang's semantic analysis); the
// kernels' threadgroup memory is checked by the harness device (Pipeline.StaticShared).

//go:embed cxx/msl14.h
var msl14Header string

var (
	// reAttribute is a C++11 attribute ([[buffer(0)]], [[host_name("x")]]): Metal's, which
	// clang does not know; the threadgroup in [[threadgroup(0)]] would be the macro.
	reAttribute = regexp.MustCompile(`\[\[[^\]]*\]\]`)
	// reLocalThreadgroup is a threadgroup variable declared in a function body (a statement
	// on its own line, no pointer or reference): static in C++, as a variable in an address
	// space other than the default may not be automatic.
	reLocalThreadgroup = regexp.MustCompile(`(?m)^([ \t]+)threadgroup([ \t]+[\w:<>, ]+?[ \t]+\w+[ \t]*(?:\[[^\]\n]*\][ \t]*)*;)`)
)

// strictFlags: warnings that are C++17 or later extensions are errors (the kernels are
// C++14, as Metal 3.0 is); the others are off, as what is checked is what Apple's compiler
// would refuse.
var strictFlags = []string{
	"-std=c++14", "-fsyntax-only", "-nostdinc", "-nostdinc++", "-ffreestanding", "-fsigned-char",
	"-Wno-everything", "-Werror=c++17-extensions", "-Werror=c++20-extensions",
	"-ferror-limit=30", "-fno-color-diagnostics", "-x", "c++",
}

// CheckStrict compiles source, one kernel translation unit (a .metal file with its
// includes inlined, as kernels.Source() keeps #line directives), with cxx/msl14.h, and
// returns clang's messages when it does not compile. ErrNoCompiler without clang++-16.
func CheckStrict(ctx context.Context, source string) error {
	if _, err := compilerVersion(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redlite-strict-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "msl14.h"), []byte(msl14Header), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kernels.cpp"), []byte(strictSource(source)), 0o644); err != nil {
		return err
	}
	args := append(append([]string{}, strictFlags...), "-include", "msl14.h", "kernels.cpp")
	if err := clang(ctx, dir, args...); err != nil {
		return errors.New("harness: strict compile (C++14, Metal's address spaces and overloads): " + err.Error())
	}
	return nil
}

// strictSource rewrites what C++ cannot say as Metal does, keeping every line where it was:
// comments and Metal's attributes become spaces, <metal_…> includes go (msl14.h stands in),
// and kernel-scope threadgroup variables become static.
func strictSource(src string) string {
	s := maskComments(src)
	s = reMetalInc.ReplaceAllStringFunc(s, func(m string) string { return strings.Repeat(" ", len(m)) })
	s = reAttribute.ReplaceAllStringFunc(s, func(m string) string { return keepNewlines(m, "") })
	return reLocalThreadgroup.ReplaceAllString(s, "${1}static threadgroup$2")
}

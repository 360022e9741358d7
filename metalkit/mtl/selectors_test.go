package mtl

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// The selector check: a wrong selector or argument type in an Objective-C message fails
// only at run time on a Mac, so every message the Metal device sends is declared in
// msg.go and checked here, on Linux, against Apple's published signatures
// (testdata/selectors.txt says where each came from). The darwin files are parsed too, so
// that a message sent any other way, or declared where Linux does not compile it, fails.

// published is one entry of testdata/selectors.txt.
type published struct {
	kind, name   string
	result, args string // type encodings, arguments space-separated ("" for none)
	line         int
}

func readPublished(t *testing.T) map[string]published {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "selectors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]published{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "|")
		for i := range fs {
			fs[i] = strings.TrimSpace(fs[i])
		}
		var p published
		switch {
		case len(fs) == 6 && fs[0] == "message":
			p = published{kind: "message", name: fs[1], result: fs[3], args: fs[4]}
		case len(fs) == 3 && fs[0] == "class":
			p = published{kind: "class", name: fs[1]}
		case len(fs) == 5 && fs[0] == "function":
			p = published{kind: "function", name: fs[1], result: fs[2], args: fs[3]}
		default:
			t.Fatalf("selectors.txt:%d: cannot read %q", n, line)
		}
		if p.args == "-" {
			p.args = ""
		}
		p.line = n
		key := p.kind + " " + p.name
		if _, dup := out[key]; dup {
			t.Fatalf("selectors.txt:%d: %s listed twice", n, key)
		}
		out[key] = p
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// encoding is the Objective-C type encoding of the C type a Go type is passed as.
func encoding(t reflect.Type) string {
	switch t {
	case typeOf[id]():
		return "@"
	case typeOf[*id]():
		return "^@"
	case typeOf[sel]():
		return ":"
	case typeOf[block]():
		return "@?"
	case typeOf[void]():
		return "v"
	case typeOf[*byte]():
		return "*"
	case typeOf[*uint]():
		return "^Q"
	case typeOf[nsRange]():
		return "{_NSRange=QQ}"
	case typeOf[*mtlSize]():
		// arm64 passes an MTLSize as a pointer to a copy (msg_call.go): declared as the
		// pointer, it is the aggregate Apple declares.
		return encoding(typeOf[mtlSize]())
	case typeOf[mtlSize]():
		var b strings.Builder
		b.WriteString("{MTLSize=")
		for i := range t.NumField() {
			b.WriteString(encoding(t.Field(i).Type))
		}
		b.WriteString("}")
		return b.String()
	}
	switch t.Kind() {
	case reflect.Uint, reflect.Uint64:
		if t.Size() == 8 {
			return "Q"
		}
	case reflect.Int, reflect.Int64:
		if t.Size() == 8 {
			return "q"
		}
	case reflect.Uint32:
		return "I"
	case reflect.Int32:
		return "i"
	case reflect.Bool:
		return "B"
	case reflect.Float32:
		return "f"
	case reflect.Float64:
		return "d"
	case reflect.String:
		return "*"
	case reflect.UnsafePointer:
		return "^v"
	}
	return "?(" + t.String() + ")"
}

// unqualified drops the const qualifier r: a Go argument passes a pointer the same way
// whether the callee promises not to write through it.
func unqualified(enc string) string { return strings.ReplaceAll(enc, "r", "") }

// checkMessage compares a declaration with the published signature.
func checkMessage(s signature, p published) error {
	want := strings.Fields(p.args)
	if colons := strings.Count(s.Selector, ":"); colons != len(s.Args) || colons != len(want) {
		return fmt.Errorf("%s: declared with %d arguments, the selector has %d colons, Apple's signature (selectors.txt:%d) %d arguments", s.Selector, len(s.Args), colons, p.line, len(want))
	}
	if got := encoding(s.Result); got != unqualified(p.result) {
		return fmt.Errorf("%s: result declared %s (%s), Apple's is %s (selectors.txt:%d)", s.Selector, s.Result, got, p.result, p.line)
	}
	for i, a := range s.Args {
		if got := encoding(a); got != unqualified(want[i]) {
			return fmt.Errorf("%s: argument %d declared %s (%s), Apple's is %s (selectors.txt:%d)", s.Selector, i+1, a, got, want[i], p.line)
		}
	}
	return nil
}

func TestSelectors(t *testing.T) {
	pub := readPublished(t)
	declared := map[string]bool{}

	t.Run("MessagesMatchApple", func(t *testing.T) {
		if len(messages) == 0 {
			t.Fatal("no message declared")
		}
		for _, m := range messages {
			s := m.signature()
			if declared["message "+s.Selector] {
				t.Errorf("%s declared twice", s.Selector)
			}
			declared["message "+s.Selector] = true
			p, ok := pub["message "+s.Selector]
			if !ok {
				t.Errorf("%s is not in testdata/selectors.txt: add Apple's signature, with its source, or fix the selector", s.Selector)
				continue
			}
			if err := checkMessage(s, p); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("ClassesMatchApple", func(t *testing.T) {
		for _, c := range classes {
			declared["class "+c.name] = true
			if _, ok := pub["class "+c.name]; !ok {
				t.Errorf("class %s is not in testdata/selectors.txt", c.name)
			}
		}
	})

	// The list stays exactly what we send, so a reader can trust it as the inventory.
	t.Run("NothingListedUnused", func(t *testing.T) {
		for key, p := range pub {
			if p.kind != "function" && !declared[key] {
				t.Errorf("selectors.txt:%d: %s is listed but not declared in msg.go", p.line, key)
			}
		}
	})

	t.Run("OnlyDeclaredMessagesAreSent", func(t *testing.T) {
		problems, err := sourceProblems(".", pub)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	})
}

// sourceProblems parses every Go file in dir, darwin ones included, and reports messages
// declared outside msg.go (Linux would not compile, so not check, them), purego/objc (which
// sends by reflection), the runtime called outside msg_call.go, C symbols looked up that are
// not listed, and declarations never used.
func sourceProblems(dir string, pub map[string]published) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	registered := map[string]bool{}
	for _, m := range messages {
		registered[m.signature().Selector] = true
	}
	for _, c := range classes {
		registered["class "+c.name] = true
	}
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	declVars := map[string]string{} // msg.go's package-level message and class variables
	used := map[string]bool{}       // identifiers used outside msg.go
	fset := token.NewFileSet()
	for _, path := range files {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				checkCall(report, fset, name, n, registered, pub)
			case *ast.ValueSpec:
				if name == "msg.go" {
					for i, v := range n.Values {
						if call, ok := v.(*ast.CallExpr); ok && isConstructor(call) {
							declVars[n.Names[i].Name] = fset.Position(n.Pos()).String()
						}
					}
				}
			case *ast.Ident:
				if name != "msg.go" {
					used[n.Name] = true
				}
			}
			return true
		})
	}
	for v, pos := range declVars {
		if !used[v] {
			report("%s: %s is declared but never sent", pos, v)
		}
	}
	if len(declVars) > 0 && len(declVars) != len(messages)+len(classes) {
		report("msg.go declares %d message and class variables, the registry holds %d", len(declVars), len(messages)+len(classes))
	}
	return problems, nil
}

func isConstructor(call *ast.CallExpr) bool {
	fn := call.Fun
	switch f := fn.(type) {
	case *ast.IndexExpr:
		fn = f.X
	case *ast.IndexListExpr:
		fn = f.X
	}
	id, ok := fn.(*ast.Ident)
	return ok && (strings.HasPrefix(id.Name, "newMsg") || id.Name == "newClass")
}

func checkCall(report func(string, ...any), fset *token.FileSet, file string, call *ast.CallExpr, registered map[string]bool, pub map[string]published) {
	pos := fset.Position(call.Pos())
	literal := func() (string, bool) {
		for _, a := range call.Args {
			if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				return s, err == nil
			}
		}
		return "", false
	}
	if isConstructor(call) {
		s, ok := literal()
		switch {
		case file != "msg.go":
			report("%s: a message or class declared outside msg.go (Linux would not check it)", pos)
		case !ok:
			report("%s: a message or class declared without a literal name", pos)
		case isClass(call):
			if !registered["class "+s] {
				report("%s: class %s is not in the registry", pos, s)
			}
		case !registered[s]:
			report("%s: message %s is not in the registry", pos, s)
		}
		return
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return
	}
	switch {
	case pkg.Name == "objc":
		report("%s: objc.%s: purego/objc sends by reflection; declare the message in msg.go", pos, sel.Sel.Name)
		if s, lit := literal(); lit {
			report("%s: objc.%s(%q) with a literal: declare it in msg.go", pos, sel.Sel.Name, s)
		}
	case pkg.Name == "rt" && (sel.Sel.Name == "Call" || sel.Sel.Name == "RegisterFunc"):
		if file != "msg_call.go" && file != "runtime.go" {
			report("%s: rt.%s outside msg_call.go: send messages through msg.go's declarations", pos, sel.Sel.Name)
		}
	case pkg.Name == "purego" && sel.Sel.Name == "Dlsym":
		s, lit := literal()
		if !lit {
			report("%s: purego.Dlsym without a literal symbol", pos)
		} else if _, ok := pub["function "+s]; !ok {
			report("%s: C function %s is not in testdata/selectors.txt", pos, s)
		}
	case pkg.Name == "purego" && sel.Sel.Name == "SyscallN":
		if file != "mtl_darwin.go" {
			report("%s: purego.SyscallN outside mtl_darwin.go: C is called through the Runtime", pos)
		}
	}
}

func isClass(call *ast.CallExpr) bool {
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == "newClass"
}

// The check can fail: a wrong result, a wrong argument and a wrong count are each caught.
func TestCheckMessageCatchesMistakes(t *testing.T) {
	p := published{kind: "message", name: "setBuffer:offset:atIndex:", result: "v", args: "@ Q Q"}
	good := signature{"setBuffer:offset:atIndex:", typeOf[void](), []reflect.Type{typeOf[id](), typeOf[uint](), typeOf[uint]()}}
	if err := checkMessage(good, p); err != nil {
		t.Fatalf("a correct declaration fails: %v", err)
	}
	for name, s := range map[string]signature{
		"result":   {good.Selector, typeOf[id](), good.Args},
		"argument": {good.Selector, good.Result, []reflect.Type{typeOf[id](), typeOf[uint32](), typeOf[uint]()}},
		"count":    {good.Selector, good.Result, good.Args[:2]},
		"pointer":  {good.Selector, good.Result, []reflect.Type{typeOf[unsafe.Pointer](), typeOf[uint](), typeOf[uint]()}},
	} {
		if err := checkMessage(s, p); err == nil {
			t.Errorf("a wrong %s passes", name)
		}
	}
}

// The source check can fail: a message sent past the declarations, declared in a darwin
// file, C called past the runtime, and an unlisted C symbol are each reported.
func TestSourceProblemsCatchStraySends(t *testing.T) {
	dir := t.TempDir()
	stray := `//go:build darwin

package mtl

var msgStray = newMsg0[id]("strayMessage")

func stray(lib uintptr) {
	objc.ID(0).Send(objc.RegisterName("setBufferOffset:atIndex:"), 0, 1)
	purego.Dlsym(lib, "MTLCopyAllDevices")
	purego.SyscallN(lib, 0)
	rt.Call(rt.MsgSend, 0, 0, 0, 0, 0, 0)
	_ = msgStray
}
`
	if err := os.WriteFile(filepath.Join(dir, "stray_darwin.go"), []byte(stray), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := sourceProblems(dir, readPublished(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"declared outside msg.go",
		"objc.RegisterName: purego/objc sends by reflection",
		"purego.SyscallN outside mtl_darwin.go",
		"rt.Call outside msg_call.go",
		`objc.RegisterName("setBufferOffset:atIndex:") with a literal`,
		"C function MTLCopyAllDevices is not in",
	}
	all := strings.Join(problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("no problem reported containing %q; got:\n%s", w, all)
		}
	}
}

package harness

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The generator turns an MSL library source into C++ that msl.h can compile, keeping every
// line where it was (so clang's messages point at the original lines), and writes the glue:
// one function per kernel that binds a thread's buffers, threadgroup memory and thread
// attributes to the kernel's parameters, and the table of kernels the runtime runs.
//
// What it rewrites:
//   - kernel parameter attributes ([[buffer(n)]], [[thread_position_in_grid]], …): removed,
//     remembered for the glue;
//   - kernel-scope `threadgroup T name[N];` declarations: one allocation per threadgroup
//     shared by its threads (each fiber asks the runtime for the memory by a key);
//   - `constant T name [[function_constant(i)]];`: a variable the runtime sets before every
//     dispatch (so a function constant cannot size an array or be a template argument, and
//     a program-scope constant computed from one is computed once, before any dispatch);
//   - template instantiations `template [[host_name("x")]] kernel T f<…>;`: removed, the
//     glue calls f<…> under the name x;
//   - half literals (1.0h) to _Float16 literals (1.0f16), and `#include <metal_…>` lines away.

// kernel is one kernel entry point of the library, as the glue calls it.
type kernel struct {
	Name    string // the host name: what Device.Pipeline takes
	Call    string // the C++ function (a template specialisation for host_name instantiations)
	Params  []param
	Buffers []int // [[buffer(n)]] indices
	Shared  []int // [[threadgroup(n)]] indices
	// Static is the sizeof of each kernel-scope threadgroup variable (C++ expressions, summed
	// in the glue); StaticShared their total in bytes, as the process reports it.
	Static       []string
	StaticShared int
}

type param struct {
	Type string // as written, address space included
	Name string
	Attr string // buffer, threadgroup, or a thread attribute
	Arg  int    // n of buffer(n)/threadgroup(n)
}

// attrField is where the runtime's __msl_ctx keeps each thread attribute.
var attrField = map[string]string{
	"thread_position_in_grid":          "c->tpig",
	"thread_position_in_threadgroup":   "c->tpitg",
	"threadgroup_position_in_grid":     "c->tgpig",
	"threads_per_threadgroup":          "c->tptg",
	"dispatch_threads_per_threadgroup": "c->tptg",
	"threadgroups_per_grid":            "c->tgpg",
	"threads_per_grid":                 "c->tpgrid",
	"thread_index_in_threadgroup":      "&c->tiitg",
	"simdgroup_index_in_threadgroup":   "&c->sgitg",
	"thread_index_in_simdgroup":        "&c->tiisg",
	"simdgroups_per_threadgroup":       "&c->sgptg",
	"threads_per_simdgroup":            "&c->tpsg",
	"thread_execution_width":           "&c->tpsg",
}

type edit struct {
	start, end int
	text       string
}

type generated struct {
	Code    string // the rewritten source followed by the glue
	Kernels []kernel
}

var (
	reKernel      = regexp.MustCompile(`\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(`)
	reHostName    = regexp.MustCompile(`\btemplate\s*\[\[\s*host_name\s*\(\s*"([^"]*)"\s*\)\s*\]\]\s*kernel\s+([^;]*?)\s+([A-Za-z_][\w:]*)\s*(<[^;]*>)\s*;`)
	reFuncConst   = regexp.MustCompile(`\bconstant\s+([A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*\[\[\s*function_constant\s*\(([^\]]*)\)\s*\]\]\s*;`)
	reHalfLit     = regexp.MustCompile(`\b((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH]\b`)
	reMetalInc    = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*<metal_\w+>[^\n]*`)
	reTGDecl      = regexp.MustCompile(`^threadgroup\s+([^\[]+?)\s*\b([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$`)
	reBrackets    = regexp.MustCompile(`\[[^\]]*\]`)
	reIdent       = regexp.MustCompile(`[A-Za-z_]\w*`)
	reAttr        = regexp.MustCompile(`^\s*([A-Za-z_]\w*)\s*(?:\(\s*([^)]*?)\s*\))?`)
	reIndexedAttr = regexp.MustCompile(`^\d+$`)
)

// generate rewrites src and writes the glue. Errors name the kernel and what is unsupported.
func generate(src string) (*generated, error) {
	masked := maskComments(src)
	var edits []edit
	blank := func(start, end int) {
		edits = append(edits, edit{start, end, keepNewlines(src[start:end], "")})
	}

	for _, m := range reMetalInc.FindAllStringIndex(masked, -1) {
		blank(m[0], m[1])
	}
	for _, m := range reFuncConst.FindAllStringSubmatchIndex(masked, -1) {
		typ, name, idx := masked[m[2]:m[3]], masked[m[4]:m[5]], masked[m[6]:m[7]]
		text := fmt.Sprintf("static %[1]s %[2]s; static bool __msl_fcdef_%[2]s; static const int __msl_fcreg_%[2]s = __msl_fc_register((%[3]s), &%[2]s, __msl_fc_type<%[1]s>(), &__msl_fcdef_%[2]s);", typ, name, idx)
		edits = append(edits, edit{m[0], m[1], keepNewlines(src[m[0]:m[1]], text)})
	}

	// Kernel functions: signatures and bodies.
	templates := map[string]templateKernel{}
	var kernels []kernel
	seen := map[string]bool{}
	for _, m := range reKernel.FindAllStringSubmatchIndex(masked, -1) {
		name := masked[m[2]:m[3]]
		open := m[1] - 1
		closeParen := matchClose(masked, open)
		if closeParen < 0 {
			return nil, fmt.Errorf("harness: kernel %s: unbalanced parameter list", name)
		}
		params, pedits, err := parseParams(name, masked, open+1, closeParen)
		if err != nil {
			return nil, err
		}
		edits = append(edits, pedits...)
		bodyOpen := strings.IndexByte(masked[closeParen:], '{')
		if bodyOpen < 0 {
			return nil, fmt.Errorf("harness: kernel %s: no body", name)
		}
		bodyOpen += closeParen
		bodyClose := matchClose(masked, bodyOpen)
		if bodyClose < 0 {
			return nil, fmt.Errorf("harness: kernel %s: unbalanced braces", name)
		}
		tedits, static, err := threadgroupDecls(name, src, masked, bodyOpen+1, bodyClose)
		if err != nil {
			return nil, err
		}
		edits = append(edits, tedits...)
		if isTemplate(masked, m[0]) {
			templates[name] = templateKernel{params, static}
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("harness: kernel %s is defined twice", name)
		}
		seen[name] = true
		kernels = append(kernels, newKernel(name, name, params, static))
	}
	for _, m := range reHostName.FindAllStringSubmatchIndex(masked, -1) {
		host, fn, targs := src[m[2]:m[3]], masked[m[6]:m[7]], masked[m[8]:m[9]]
		tk, ok := templates[fn]
		if !ok {
			return nil, fmt.Errorf("harness: kernel %s: host_name instantiation of %s, which is not a template kernel of the library", host, fn)
		}
		if seen[host] {
			return nil, fmt.Errorf("harness: kernel %s is defined twice", host)
		}
		seen[host] = true
		kernels = append(kernels, newKernel(host, fn+targs, tk.params, tk.static))
		blank(m[0], m[1])
	}

	// Half literals outside the regions already rewritten.
	for _, m := range reHalfLit.FindAllStringSubmatchIndex(masked, -1) {
		edits = append(edits, edit{m[0], m[1], src[m[2]:m[3]] + "f16"})
	}

	var b strings.Builder
	b.WriteString(applyEdits(src, edits))
	b.WriteString("\n#line 1 \"harness-glue.cpp\"\n")
	for i, k := range kernels {
		fmt.Fprintf(&b, "static void __msl_glue_%d(const __msl_ctx *c) {\n\tusing F = decltype(&%s);\n\t%s(", i, k.Call, k.Call)
		for j, p := range k.Params {
			if j > 0 {
				b.WriteString(",")
			}
			switch p.Attr {
			case "buffer":
				fmt.Fprintf(&b, "\n\t\t__msl_bind_buf<__msl_arg_t<F, %d>>(c, %d)", j, p.Arg)
			case "threadgroup":
				fmt.Fprintf(&b, "\n\t\t__msl_bind_tg<__msl_arg_t<F, %d>>(c, %d)", j, p.Arg)
			default:
				fmt.Fprintf(&b, "\n\t\t__msl_bind_attr<__msl_arg_t<F, %d>>(%s)", j, attrField[p.Attr])
			}
		}
		b.WriteString(");\n}\n")
	}
	b.WriteString("extern \"C\" const __msl_kernel_desc __msl_kernels[] = {\n")
	for i, k := range kernels {
		// Every threadgroup variable the kernel declares counts, reached or not, as Metal
		// counts it (staticThreadgroupMemoryLength).
		fmt.Fprintf(&b, "\t{%q, __msl_glue_%d, uint32_t(0", k.Name, i)
		for _, s := range k.Static {
			b.WriteString(" + " + s)
		}
		b.WriteString(")},\n")
	}
	b.WriteString("\t{nullptr, nullptr, 0},\n};\n")
	fmt.Fprintf(&b, "extern \"C\" const int __msl_nkernels = %d;\n", len(kernels))
	return &generated{Code: b.String(), Kernels: kernels}, nil
}

// templateKernel is what a template kernel's instantiations share. A threadgroup
// variable's size may not depend on the template's parameters (the glue sums the sizes at
// namespace scope).
type templateKernel struct {
	params []param
	static []string
}

func newKernel(name, call string, params []param, static []string) kernel {
	k := kernel{Name: name, Call: call, Params: params, Static: static}
	for _, p := range params {
		switch p.Attr {
		case "buffer":
			k.Buffers = append(k.Buffers, p.Arg)
		case "threadgroup":
			k.Shared = append(k.Shared, p.Arg)
		}
	}
	return k
}

// parseParams reads the parameters between start and end (the parentheses excluded) and
// returns edits that blank their attributes.
func parseParams(kname, masked string, start, end int) ([]param, []edit, error) {
	var params []param
	var edits []edit
	for _, r := range splitTopLevel(masked, start, end) {
		text := masked[r[0]:r[1]]
		if strings.TrimSpace(text) == "" {
			continue
		}
		a := strings.Index(text, "[[")
		if a < 0 {
			return nil, nil, fmt.Errorf("harness: kernel %s: parameter %q has no attribute", kname, strings.TrimSpace(text))
		}
		z := strings.Index(text[a:], "]]")
		if z < 0 {
			return nil, nil, fmt.Errorf("harness: kernel %s: parameter %q: unterminated attribute", kname, strings.TrimSpace(text))
		}
		attrText := text[a+2 : a+z]
		edits = append(edits, edit{r[0] + a, r[0] + a + z + 2, ""})
		decl := strings.TrimSpace(text[:a] + " " + text[a+z+2:])
		ids := reIdent.FindAllStringIndex(decl, -1)
		if len(ids) < 2 {
			return nil, nil, fmt.Errorf("harness: kernel %s: cannot read parameter %q", kname, strings.TrimSpace(text))
		}
		last := ids[len(ids)-1]
		p := param{Name: decl[last[0]:last[1]], Type: strings.Join(strings.Fields(decl[:last[0]]), " ")}
		am := reAttr.FindStringSubmatch(attrText)
		if am == nil {
			return nil, nil, fmt.Errorf("harness: kernel %s: parameter %s: cannot read attribute [[%s]]", kname, p.Name, attrText)
		}
		p.Attr = am[1]
		switch p.Attr {
		case "buffer", "threadgroup":
			if !reIndexedAttr.MatchString(am[2]) {
				return nil, nil, fmt.Errorf("harness: kernel %s: parameter %s: [[%s]] needs a literal index", kname, p.Name, attrText)
			}
			fmt.Sscan(am[2], &p.Arg)
			if p.Arg >= 31 {
				return nil, nil, fmt.Errorf("harness: kernel %s: parameter %s: index %d is above 30", kname, p.Name, p.Arg)
			}
		default:
			if _, ok := attrField[p.Attr]; !ok {
				return nil, nil, fmt.Errorf("harness: kernel %s: parameter %s: attribute [[%s]] is not supported by the harness", kname, p.Name, p.Attr)
			}
		}
		params = append(params, p)
	}
	return params, edits, nil
}

// threadgroupDecls rewrites the threadgroup variable declarations of a kernel body and
// returns the size of each (sizeof expressions).
func threadgroupDecls(kname, src, masked string, start, end int) ([]edit, []string, error) {
	var edits []edit
	var sizes []string
	for i := start; i < end; {
		j := strings.Index(masked[i:end], "threadgroup")
		if j < 0 {
			break
		}
		pos := i + j
		i = pos + len("threadgroup")
		if pos > 0 && isIdentByte(masked[pos-1]) || i < len(masked) && isIdentByte(masked[i]) {
			continue
		}
		k := pos - 1
		for k >= start && (masked[k] == ' ' || masked[k] == '\t' || masked[k] == '\n' || masked[k] == '\r') {
			k--
		}
		if k >= start && masked[k] != '{' && masked[k] != '}' && masked[k] != ';' {
			continue // not a statement start: a cast or a parameter
		}
		semi := strings.IndexByte(masked[pos:end], ';')
		if semi < 0 {
			return nil, nil, fmt.Errorf("harness: kernel %s: unterminated threadgroup declaration", kname)
		}
		stmt := masked[pos : pos+semi]
		outside := reBrackets.ReplaceAllString(stmt, "[]") // array sizes may hold any expression
		if strings.ContainsAny(outside, "*&(=") {
			continue // a pointer into threadgroup memory, not a threadgroup variable
		}
		if strings.Contains(outside, ",") {
			return nil, nil, fmt.Errorf("harness: kernel %s: declare one threadgroup variable per statement: %q", kname, strings.TrimSpace(stmt))
		}
		m := reTGDecl.FindStringSubmatch(strings.TrimSpace(stmt))
		if m == nil {
			return nil, nil, fmt.Errorf("harness: kernel %s: cannot read threadgroup declaration %q", kname, strings.TrimSpace(stmt))
		}
		typ := strings.TrimSpace(m[1])
		name := m[2]
		dims := strings.Join(strings.Fields(m[3]), "")
		text := fmt.Sprintf("static char __msl_tgk_%[1]s; auto &%[1]s = *__msl_tg<%[2]s %[3]s>(&__msl_tgk_%[1]s)", name, typ, dims)
		edits = append(edits, edit{pos, pos + semi, keepNewlines(src[pos:pos+semi], text)})
		sizes = append(sizes, fmt.Sprintf("sizeof(%s %s)", typ, dims))
		i = pos + semi
	}
	return edits, sizes, nil
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isTemplate reports whether the kernel keyword at pos follows a template<…> header.
func isTemplate(masked string, pos int) bool {
	k := pos - 1
	for k >= 0 && strings.ContainsRune(" \t\r\n", rune(masked[k])) {
		k--
	}
	if k < 0 || masked[k] != '>' {
		return false
	}
	depth := 0
	for ; k >= 0; k-- {
		switch masked[k] {
		case '>':
			depth++
		case '<':
			depth--
		}
		if depth == 0 {
			break
		}
	}
	if k < 0 {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(masked[:k], " \t\r\n"), "template")
}

// matchClose returns the index of the bracket closing the one at open, or -1.
func matchClose(s string, open int) int {
	o := s[open]
	c := map[byte]byte{'(': ')', '{': '}', '[': ']'}[o]
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case o:
			depth++
		case c:
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// splitTopLevel splits s[start:end] at commas outside brackets.
func splitTopLevel(s string, start, end int) [][2]int {
	var out [][2]int
	depth := 0
	from := start
	for i := start; i < end; i++ {
		switch s[i] {
		case '(', '[', '{', '<':
			depth++
		case ')', ']', '}', '>':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, [2]int{from, i})
				from = i + 1
			}
		}
	}
	return append(out, [2]int{from, end})
}

// maskComments replaces comments by spaces, keeping newlines and every offset.
func maskComments(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"' || b[i] == '\'':
			q := b[i]
			for i++; i < len(b) && b[i] != q && b[i] != '\n'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			for ; i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/'); i++ {
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
			if i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			}
		}
	}
	return string(b)
}

// keepNewlines returns text followed by as many newlines as old has, so that the lines
// after a rewrite keep their numbers.
func keepNewlines(old, text string) string {
	return text + strings.Repeat("\n", strings.Count(old, "\n"))
}

// applyEdits applies non-overlapping edits; an edit overlapping an earlier one is dropped
// (a half literal inside a rewritten declaration).
func applyEdits(src string, edits []edit) string {
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b strings.Builder
	at := 0
	for _, e := range edits {
		if e.start < at {
			continue
		}
		b.WriteString(src[at:e.start])
		b.WriteString(e.text)
		at = e.end
	}
	b.WriteString(src[at:])
	return b.String()
}

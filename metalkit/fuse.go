package metalkit

// The fused MoE tail. A qwen3next layer's routed experts end in MatMulExperts (the down
// projection, x per slot) and a WeightedSum of its [n, k, d] products by the router's
// weights. In decode the products are a few KB that one dispatch writes and the next reads
// back; Red Lite runs the two as one kernel (mul_mv_id_sum, kernels/mul_mat.h) with
// bit-identical output. Compute rewrites such a pair before it plans the pass, so the
// products are never placed in scratch either.

// expertsCall is what MatMulExperts recorded: y [n, k, rows] from x, ids and w.
type expertsCall struct {
	w                   *weight
	experts, rows, cols int
	x                   *tensor
	perSlot             bool
	ids                 *tensor
	k, n                int
	out                 *tensor
}

// sumCall is what WeightedSum recorded: out [n, d] = Σ_j w[i][j]·x[i][j].
type sumCall struct {
	x, w, out *tensor
}

// fuseTails replaces, among operations [first, len(c.ops)), every WeightedSum whose x is the
// whole output of a decode-sized MatMulExperts of the same Compute by one fused operation in
// the sum's place, and empties the MatMulExperts. It fuses only when nothing else can see
// the products: no other operation and no view reads them, they are not an output of the
// pass (so neither Read nor Name's hook can ask for them), and no operation between the two
// touches the product's inputs (the fused kernel reads them later than MatMulExperts would).
func (c *context) fuseTails(first int) {
	for j := first; j < len(c.ops); j++ {
		s := c.ops[j].sum
		if s == nil {
			continue
		}
		y := s.x
		// y.used before the pass's liveness is set means a view of y exists.
		if y.root != y || y.ctx != c || y.used || y.keep || y.planned {
			continue
		}
		i := j - 1
		for i >= first && (c.ops[i].experts == nil || c.ops[i].experts.out != y) {
			i--
		}
		if i < first {
			continue
		}
		m := c.ops[i].experts
		if m.n > matVecMaxTokens {
			continue
		}
		if touched(c.ops[i+1:j], y, m.x.root, m.ids.root) || touched(c.ops[j+1:], y) {
			continue
		}
		c.ops[j] = op{
			name:   "matmul experts+sum",
			ins:    []*tensor{m.x, m.ids, s.w},
			outs:   []*tensor{s.out},
			encode: func(e *encoder) { c.encodeExperts(e, m, s) },
		}
		c.ops[i] = op{name: "matmul experts (fused into the sum)"}
		// The products exist nowhere: a later use or Read fails as for an intermediate
		// whose bytes went to other tensors.
		y.used, y.planned, y.released = true, true, true
	}
}

// touched reports whether any of ops reads or writes a tensor on one of roots. A pass scans
// the operations after each fused pair once: for a decode step of Qwen3-Next-80B (about
// 1,800 operations, 48 pairs) some 50,000 pointer comparisons, without allocating.
func touched(ops []op, roots ...*tensor) bool {
	for _, o := range ops {
		for _, ts := range [][]*tensor{o.ins, o.outs} {
			for _, t := range ts {
				for _, r := range roots {
					if t.root == r {
						return true
					}
				}
			}
		}
	}
	return false
}

package mtl

// The one place that talks to the Objective-C runtime (runtime.go): each declared message
// (msg.go) gets its selector registered and objc_msgSend bound to its exact Go signature on
// first use, so a send is one typed call (no per-call reflection over ...any, as objc.Send
// would do).

// isVoid reports a message without a result: its objc_msgSend is declared without one, so
// purego never has to return an empty struct.
func isVoid[R any]() bool { return typeOf[R]() == typeOf[void]() }

// bind registers b's selector and binds objc_msgSend to the message's Go signature: fn for
// a message with a result, fnv for one without. Once per message.
func bind[F, V any](b *msgBase, void bool, fn *F, fnv *V) {
	b.once.Do(func() {
		b.sel = registerName(b.name)
		if void {
			rt.RegisterFunc(fnv, rt.MsgSend)
		} else {
			rt.RegisterFunc(fn, rt.MsgSend)
		}
	})
}

func (c *class) get() id {
	c.once.Do(func() { c.id = getClass(c.name) })
	return c.id
}

// selector is m's registered selector, for respondsToSelector:.
func (m *msg1[R, A]) selector() sel { m.bind(); return m.sel }

func (m *msg0[R]) bind() { bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv) }

func (m *msg0[R]) send(o id) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel)
		var r R
		return r
	}
	return m.fn(o, m.sel)
}

func (m *msg1[R, A]) bind() { bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv) }

func (m *msg1[R, A]) send(o id, a A) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel, a)
		var r R
		return r
	}
	return m.fn(o, m.sel, a)
}

func (m *msg2[R, A, B]) bind() { bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv) }

func (m *msg2[R, A, B]) send(o id, a A, b B) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel, a, b)
		var r R
		return r
	}
	return m.fn(o, m.sel, a, b)
}

func (m *msg3[R, A, B, C]) bind() { bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv) }

func (m *msg3[R, A, B, C]) send(o id, a A, b B, c C) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel, a, b, c)
		var r R
		return r
	}
	return m.fn(o, m.sel, a, b, c)
}

func (m *msg4[R, A, B, C, D]) bind() { bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv) }

func (m *msg4[R, A, B, C, D]) send(o id, a A, b B, c C, d D) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel, a, b, c, d)
		var r R
		return r
	}
	return m.fn(o, m.sel, a, b, c, d)
}

func (m *msg8[R, A, B, C, D, E, F, G, H]) bind() {
	bind(&m.msgBase, isVoid[R](), &m.fn, &m.fnv)
}

func (m *msg8[R, A, B, C, D, E, F, G, H]) send(o id, a A, b B, c C, d D, e E, f F, g G, h H) R {
	m.bind()
	if m.fnv != nil {
		m.fnv(o, m.sel, a, b, c, d, e, f, g, h)
		var r R
		return r
	}
	return m.fn(o, m.sel, a, b, c, d, e, f, g, h)
}

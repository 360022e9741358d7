package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"strings"

	"github.com/redlite/batch/engine/ml"
)

// A session snapshot is the state of one sequence after its first Pos tokens: enough to
// continue it in another session of the same model file, on this worker or another (prompt
// reuse, moving a job). Layout, little-endian:
//
//	magic "RLSNAP01"
//	u8    length of the architecture name, then the name
//	u64   model fingerprint (architecture, metadata and tensor table of the file)
//	u8    KV precision (ml.DType)
//	u8    flags: 1 = the state includes the MTP head's
//	u64   position
//	u64   payload length
//	u32   CRC-32 (IEEE) of the payload
//	payload: the architecture's State.Snapshot bytes
const snapshotMagic = "RLSNAP01"

// snapshotFields is the size of the fixed fields after the architecture name.
const snapshotFields = 8 + 1 + 1 + 8 + 8 + 4

const snapshotMTP = 1

// ErrBadSnapshot is wrapped by every error about a snapshot that cannot be restored.
var ErrBadSnapshot = errors.New("engine: bad session snapshot")

// Snapshot encodes the session's state.
func (s *Session) Snapshot() ([]byte, error) {
	if s.broken != nil {
		return nil, fmt.Errorf("engine: snapshot: %w", s.broken)
	}
	payload, err := s.state.Snapshot(s.m.Backend, s.pos)
	if err != nil {
		return nil, fmt.Errorf("engine: snapshot: %w", err)
	}
	kv := s.kvType
	out := make([]byte, 0, len(snapshotMagic)+64+len(payload))
	out = append(out, snapshotMagic...)
	arch := s.m.Config().Arch
	out = append(out, byte(len(arch)))
	out = append(out, arch...)
	out = binary.LittleEndian.AppendUint64(out, s.m.fingerprint())
	out = append(out, byte(kv))
	var flags byte
	if s.mtp {
		flags |= snapshotMTP
	}
	out = append(out, flags)
	out = binary.LittleEndian.AppendUint64(out, uint64(s.pos))
	out = binary.LittleEndian.AppendUint64(out, uint64(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(payload))
	return append(out, payload...), nil
}

// RestoreSession opens a session from a Snapshot taken with this model file. The session's
// KV precision must be the snapshot's and its context must hold the snapshot's positions.
func (m *Model) RestoreSession(data []byte, o SessionOptions) (*Session, error) {
	arch, h, ok := splitSnapshot(data)
	if !ok {
		return nil, fmt.Errorf("%w: not a session snapshot (%d bytes, no %q header)", ErrBadSnapshot, len(data), snapshotMagic)
	}
	if arch != m.Config().Arch {
		return nil, fmt.Errorf("%w: snapshot of a %s model, this model is %s", ErrBadSnapshot, arch, m.Config().Arch)
	}
	fp := binary.LittleEndian.Uint64(h)
	kv := ml.DType(h[8])
	mtp := h[9]&snapshotMTP != 0
	pos := binary.LittleEndian.Uint64(h[10:])
	n := binary.LittleEndian.Uint64(h[18:])
	sum := binary.LittleEndian.Uint32(h[26:])
	payload := h[snapshotFields:]
	if fp != m.fingerprint() {
		return nil, fmt.Errorf("%w: taken with another %s model file (hyperparameters or tensor table differ)", ErrBadSnapshot, arch)
	}
	if n != uint64(len(payload)) {
		return nil, fmt.Errorf("%w: truncated: payload of %d bytes, header says %d", ErrBadSnapshot, len(payload), n)
	}
	if crc32.ChecksumIEEE(payload) != sum {
		return nil, fmt.Errorf("%w: payload checksum mismatch", ErrBadSnapshot)
	}
	if kv != o.KV {
		return nil, fmt.Errorf("%w: snapshot holds a %v KV cache, the session asks for %v", ErrBadSnapshot, kv, o.KV)
	}
	if mtp != o.MTP {
		return nil, fmt.Errorf("%w: snapshot MTP state %v, the session asks for MTP %v", ErrBadSnapshot, mtp, o.MTP)
	}
	s, err := m.NewSession(o)
	if err != nil {
		return nil, err
	}
	if pos > uint64(s.Capacity()) {
		s.Close()
		return nil, fmt.Errorf("%w: snapshot holds %d positions, the session only %d", ErrBadSnapshot, pos, s.Capacity())
	}
	if err := s.state.Restore(m.Backend, int(pos), payload); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	s.pos = int(pos)
	return s, nil
}

// splitSnapshot checks the magic and returns the architecture name and what follows it.
func splitSnapshot(data []byte) (arch string, rest []byte, ok bool) {
	if len(data) < len(snapshotMagic)+1 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return "", nil, false
	}
	data = data[len(snapshotMagic):]
	n := int(data[0])
	if len(data) < 1+n+snapshotFields {
		return "", nil, false
	}
	return string(data[1 : 1+n]), data[1+n:], true
}

// fingerprint identifies the model file by its hyperparameters and tensor table (not the
// tensor bytes, which would mean reading gigabytes, nor the tokenizer arrays): two files that
// agree on both hold the same architecture, shapes and quantization types.
func (m *Model) fingerprint() uint64 {
	h := fnv.New64a()
	arch, _ := m.File.Architecture()
	fmt.Fprintf(h, "%s;", arch)
	for _, kv := range m.File.KV {
		if strings.HasPrefix(kv.Key, arch+".") {
			fmt.Fprintf(h, "%s=%v;", kv.Key, kv.Value)
		}
	}
	for _, t := range m.File.Tensors {
		fmt.Fprintf(h, "%s:%v:%v:%d:%d;", t.Name, t.Type, t.Dims, t.Offset, t.Size)
	}
	return h.Sum64()
}

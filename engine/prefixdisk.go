package engine

import (
	"container/list"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// prefixDisk is the prefix cache's directory: one file per prefix, named by its hash (which
// folds in the model, precision and block size, so files of another model are never hits),
// holding the State.Snapshot of the prefix's positions. Layout, little-endian:
//
//	magic "RLPFX001", u64 positions, u32 CRC-32 (IEEE) of the payload, payload
//
// Its files stay within maxBytes: the least recently used go first. A file that fails its
// checks is removed and counts as a miss.
type prefixDisk struct {
	dir      string
	maxBytes int64

	mu    sync.Mutex
	files map[PrefixHash]*list.Element // of *diskFile
	lru   list.List                    // most recently used first
	bytes int64
}

type diskFile struct {
	hash PrefixHash
	size int64
}

const (
	prefixFileMagic  = "RLPFX001"
	prefixFileHeader = len(prefixFileMagic) + 8 + 4
	prefixFileExt    = ".rlpfx"
)

// openPrefixDisk creates dir if needed and indexes the files in it, oldest least recent,
// trimming them to maxBytes.
func openPrefixDisk(dir string, maxBytes int64) (*prefixDisk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: prefix cache directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("engine: prefix cache directory: %w", err)
	}
	type found struct {
		f     diskFile
		mtime int64
	}
	var fs []found
	for _, de := range ents {
		name := de.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(dir, name)) // a write that did not finish
			continue
		}
		raw, err := hex.DecodeString(strings.TrimSuffix(name, prefixFileExt))
		if !strings.HasSuffix(name, prefixFileExt) || err != nil || len(raw) != len(PrefixHash{}) {
			continue // not ours
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		var h PrefixHash
		copy(h[:], raw)
		fs = append(fs, found{diskFile{h, info.Size()}, info.ModTime().UnixNano()})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mtime > fs[j].mtime })
	d := &prefixDisk{dir: dir, maxBytes: maxBytes, files: map[PrefixHash]*list.Element{}}
	for _, f := range fs {
		f := f.f
		d.files[f.hash] = d.lru.PushBack(&f)
		d.bytes += f.size
	}
	d.mu.Lock()
	d.trim(0)
	d.mu.Unlock()
	return d, nil
}

func (d *prefixDisk) path(h PrefixHash) string {
	return filepath.Join(d.dir, h.String()+prefixFileExt)
}

// trim removes the least recently used files until room more bytes fit; d.mu is held.
func (d *prefixDisk) trim(room int64) {
	for d.bytes+room > d.maxBytes {
		back := d.lru.Back()
		if back == nil {
			return
		}
		d.drop(back)
	}
}

func (d *prefixDisk) drop(el *list.Element) {
	f := el.Value.(*diskFile)
	d.lru.Remove(el)
	delete(d.files, f.hash)
	d.bytes -= f.size
	os.Remove(d.path(f.hash))
}

// put writes a prefix's snapshot unless it is there already or larger than the whole
// directory's bound. Errors leave the cache as it was (the prefix is simply not on disk).
func (d *prefixDisk) put(h PrefixHash, positions int, payload []byte) error {
	size := int64(prefixFileHeader + len(payload))
	d.mu.Lock()
	defer d.mu.Unlock()
	if el := d.files[h]; el != nil {
		d.lru.MoveToFront(el)
		return nil
	}
	if size > d.maxBytes {
		return nil
	}
	d.trim(size)
	buf := make([]byte, 0, prefixFileHeader)
	buf = append(buf, prefixFileMagic...)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(positions))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.ChecksumIEEE(payload))
	tmp := d.path(h) + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("engine: prefix cache: %w", err)
	}
	_, err = f.Write(buf)
	if err == nil {
		_, err = f.Write(payload)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, d.path(h))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: prefix cache: %w", err)
	}
	d.files[h] = d.lru.PushFront(&diskFile{h, size})
	d.bytes += size
	return nil
}

// get reads a prefix's snapshot payload, checked, and touches it.
func (d *prefixDisk) get(h PrefixHash, positions int) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	el := d.files[h]
	if el == nil {
		return nil, false
	}
	data, err := os.ReadFile(d.path(h))
	if err == nil {
		var payload []byte
		payload, err = parsePrefixFile(data, positions)
		if err == nil {
			d.lru.MoveToFront(el)
			return payload, true
		}
	}
	d.drop(el)
	return nil, false
}

// parsePrefixFile checks a prefix file and returns its payload.
func parsePrefixFile(data []byte, positions int) ([]byte, error) {
	if len(data) < prefixFileHeader || string(data[:len(prefixFileMagic)]) != prefixFileMagic {
		return nil, fmt.Errorf("%w: not a prefix cache file", ErrBadSnapshot)
	}
	pos := binary.LittleEndian.Uint64(data[len(prefixFileMagic):])
	sum := binary.LittleEndian.Uint32(data[len(prefixFileMagic)+8:])
	payload := data[prefixFileHeader:]
	if pos != uint64(positions) {
		return nil, fmt.Errorf("%w: prefix file of %d positions, its name says %d", ErrBadSnapshot, pos, positions)
	}
	if crc32.ChecksumIEEE(payload) != sum {
		return nil, fmt.Errorf("%w: prefix file checksum mismatch", ErrBadSnapshot)
	}
	return payload, nil
}

// usage is the files held and their bytes.
func (d *prefixDisk) usage() (int, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.files), d.bytes
}

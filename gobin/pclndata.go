package gobin

import (
	"bytes"
	"io"
	"sync"
)

// pclnData holds the bytes of the pclntab for the function-record reader:
// read from the file on demand, a page at a time into a small cache (the
// name index's scan and a stack's symbolization both read it mostly in
// order), or wholly in memory when there is no file to read again (tests,
// a compressed section, debug/gosym's parse). A node agent tracing many
// large executables keeps none of their tables resident: kube-apiserver's
// pclntab alone is 39 MB.
type pclnData struct {
	size uint64
	r    io.ReaderAt // the file; nil: mem is all there is (never released)
	off  int64       // file offset of the table

	mu    sync.Mutex
	mem   []byte            // the whole table, or nil when released
	pages map[uint64][]byte // page number → bytes, when released
	fifo  []uint64          // pages in the order they were read, for eviction
}

const (
	pclnPageShift = 14 // 16 KiB pages
	pclnPageSize  = 1 << pclnPageShift
	pclnPages     = 32 // at most 512 KiB cached a table
	maxCString    = 1 << 16
)

// newPclnData wraps a table read into memory. r and off, when r is not nil,
// say where the same bytes are in the file, so that release can drop them.
func newPclnData(mem []byte, r io.ReaderAt, off int64) *pclnData {
	return &pclnData{size: uint64(len(mem)), mem: mem, r: r, off: off}
}

// newPclnFile reads a table of size bytes at off in r on demand.
func newPclnFile(r io.ReaderAt, off int64, size uint64) *pclnData {
	return &pclnData{size: size, r: r, off: off}
}

// release drops the in-memory copy and the page cache, if the bytes can be
// read again.
func (d *pclnData) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.r != nil {
		d.mem, d.pages, d.fifo = nil, nil, nil
	}
}

// all returns the whole table, reading it into memory (and keeping it).
func (d *pclnData) all() ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mem == nil {
		mem := make([]byte, d.size)
		if n, err := d.r.ReadAt(mem, d.off); uint64(n) != d.size {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		d.mem, d.r, d.pages, d.fifo = mem, nil, nil, nil
	}
	return d.mem, nil
}

// at returns n bytes at off (n at most a page), or false past the end or
// when the file cannot be read. The slice must not be kept past the next
// call: released tables hand out their cache's memory.
func (d *pclnData) at(off, n uint64) ([]byte, bool) {
	if off > d.size || d.size-off < n || n > pclnPageSize {
		return nil, false
	}
	d.mu.Lock()
	if d.mem != nil {
		defer d.mu.Unlock()
		return d.mem[off : off+n], true
	}
	d.mu.Unlock()
	// A copy: an evicted page's buffer is reused, so a slice of it held
	// across a later read would show another page's bytes.
	out := make([]byte, n)
	return out, d.readInto(off, out)
}

// readInto copies len(dst) bytes at off (at most a page) into dst, or
// reports false past the end or when the file cannot be read. It allocates
// nothing: the function table's reads (two words a function, for each of
// its ~100,000 functions when the name index is built) went through at's
// copies.
func (d *pclnData) readInto(off uint64, dst []byte) bool {
	n := uint64(len(dst))
	if off > d.size || d.size-off < n || n > pclnPageSize {
		return false
	}
	if n == 0 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mem != nil {
		copy(dst, d.mem[off:off+n])
		return true
	}
	first, last := off>>pclnPageShift, (off+n-1)>>pclnPageShift
	a, ok := d.page(first)
	if !ok {
		return false
	}
	k := copy(dst, a[off&(pclnPageSize-1):])
	if first == last {
		return true
	}
	// Across two pages: the first page's part is copied before the second
	// is read. Reading the second may evict the first (the oldest in a
	// full cache) and reuse its buffer: a function record across a page
	// boundary then read the second page's bytes as its start ("function
	// record 8775 has entry 0xd242b, the function table says 0x2e83c0",
	// CI's TestFirstArgLive/arm64, twice: its labapp build from
	// /tmp/ci-main put that record across a boundary).
	b, ok := d.page(last)
	if !ok {
		return false
	}
	copy(dst[k:], b)
	return true
}

// page returns page i of a released table, reading it if not cached.
// d.mu is held.
func (d *pclnData) page(i uint64) ([]byte, bool) {
	if p, ok := d.pages[i]; ok {
		return p, true
	}
	start := i << pclnPageShift
	n := min(uint64(pclnPageSize), d.size-start)
	if d.pages == nil {
		d.pages = make(map[uint64][]byte, pclnPages)
	}
	var p []byte
	if len(d.fifo) >= pclnPages {
		// The oldest page's buffer is reused: a scan of the whole table
		// allocates nothing past the cache.
		old := d.fifo[0]
		p = d.pages[old][:0]
		delete(d.pages, old)
		d.fifo = append(d.fifo[:0], d.fifo[1:]...)
	}
	if uint64(cap(p)) < n {
		p = make([]byte, n)
	}
	p = p[:n]
	if got, _ := d.r.ReadAt(p, d.off+int64(start)); uint64(got) != n {
		return nil, false
	}
	d.pages[i] = p
	d.fifo = append(d.fifo, i)
	return p, true
}

// cstring returns the NUL-terminated string at off (at most maxCString
// bytes).
func (d *pclnData) cstring(off uint64) (string, bool) {
	var out []byte
	for len(out) < maxCString {
		if off >= d.size {
			return "", false
		}
		n := d.cstringChunk(off)
		chunk, ok := d.at(off, n)
		if !ok {
			return "", false
		}
		if i := bytes.IndexByte(chunk, 0); i >= 0 {
			return string(append(out, chunk[:i]...)), true
		}
		out = append(out, chunk...)
		off += n
	}
	return "", false
}

// equalCString reports whether the NUL-terminated string at off is s,
// without allocating.
func (d *pclnData) equalCString(off uint64, s string) bool {
	if len(s)+1 > pclnPageSize {
		got, ok := d.cstring(off)
		return ok && got == s
	}
	b, ok := d.at(off, min(uint64(len(s))+1, d.size-min(off, d.size)))
	return ok && len(b) == len(s)+1 && b[len(s)] == 0 && string(b[:len(s)]) == s
}

// hasPrefix reports whether the NUL-terminated string at off starts with
// prefix.
func (d *pclnData) hasPrefix(off uint64, prefix string) bool {
	if len(prefix) > pclnPageSize {
		s, ok := d.cstring(off)
		return ok && len(s) >= len(prefix) && s[:len(prefix)] == prefix
	}
	b, ok := d.at(off, min(uint64(len(prefix)), d.size-min(off, d.size)))
	return ok && len(b) == len(prefix) && string(b) == prefix && bytes.IndexByte(b, 0) < 0
}

// cstringChunk is how many bytes at off a string scan reads at once: at
// most cstringRead, within the page and the table. A released table hands
// out copies, and a whole page's rest copied per function name made the
// name index of a 78 MiB executable (Caddy: 0.4 s of its 1 s analysis)
// mostly memmove; Go's function names are seldom longer.
func (d *pclnData) cstringChunk(off uint64) uint64 {
	return min(cstringRead, pclnPageSize-off&(pclnPageSize-1), d.size-off)
}

const cstringRead = 256

// hashCString hashes the NUL-terminated string at off (FNV-1a) as
// hashString hashes a string.
func (d *pclnData) hashCString(off uint64) (uint64, bool) {
	h := uint64(fnvOffset)
	for n := 0; n < maxCString; {
		if off >= d.size {
			return 0, false
		}
		chunk, ok := d.at(off, d.cstringChunk(off))
		if !ok {
			return 0, false
		}
		for _, c := range chunk {
			if c == 0 {
				return h, true
			}
			h = (h ^ uint64(c)) * fnvPrime
		}
		n += len(chunk)
		off += uint64(len(chunk))
	}
	return 0, false
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashString is FNV-1a over s.
func hashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

package gobin

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
)

// Module is one module linked into the executable, from its build information.
type Module struct {
	Path    string // module path, e.g. "golang.org/x/net"
	Version string // module version, e.g. "v0.30.0"; "(devel)" for a main module built in place
	Replace string // the replacement, "path@version" or a directory, if the module is replaced
}

// FileID identifies the executable file on its filesystem. Uprobes are set
// on an inode, so the tracer attaches once per FileID, however many processes
// run the same executable.
type FileID struct {
	Dev uint64 // device number of the filesystem holding the file
	Ino uint64 // inode number
}

// Binary is an opened Go executable. Its methods are safe for concurrent use.
// Close releases the file.
type Binary struct {
	// Path is the path the executable was opened through (for OpenPID,
	// /proc/PID/exe).
	Path string
	// ExePath is the executable's own path: for OpenPID the target of the
	// /proc/PID/exe link, which is a path in the process's mount namespace
	// and may end in " (deleted)"; otherwise Path.
	ExePath string
	// AttachPath is a path the tracer can open to attach uprobes to this
	// executable: Path for Open; for OpenPID /proc/PID/root/<ExePath> when
	// it names the same inode, else /proc/PID/exe.
	AttachPath string
	// File is the device and inode of the executable.
	File FileID
	// GoVersion is the toolchain version from the build information,
	// e.g. "go1.26.8".
	GoVersion string
	// Arch is the target architecture from the ELF machine: "amd64" or "arm64".
	Arch string
	// PIE is true for position-independent executables (ELF type ET_DYN):
	// their addresses are link-time addresses that the kernel relocates;
	// file offsets are unaffected.
	PIE bool
	// Main is the main module; Modules are its dependencies.
	Main    Module
	Modules []Module

	size   int64 // of the file, when Open could stat it
	closer io.Closer
	r      io.ReaderAt
	elf    *elf.File
	order  binary.ByteOrder
	ptr    int // pointer size in bytes

	// What analysis loads on first use and Release drops (loadMu).
	loadMu   sync.Mutex
	symtab   *symtab
	symsErr  error
	symsDone bool

	dwarfMu   sync.Mutex // not loadMu: the DWARF loads beside the symbols (PrefetchDWARF)
	dwarf     *dwarfIndex
	dwarfErr  error
	dwarfDone bool

	typesMu   sync.Mutex // not loadMu: reading the section looks symbols up
	types     *typeSection
	typesErr  error
	typesDone bool

	pclnOnce sync.Once
	pcln     *pcln
	pclnErr  error

	// What the analysis found, kept across Release.
	results results
}

// results are answers that depend on the executable alone, small beside
// the tables they are computed from. A node agent releases the tables once
// a process's probes are attached; without these, each later process of
// the same file loaded them again to find the same answers (a one-shot
// CLI run every few seconds, like an exec health probe, cost the agent
// 0.6 s of analysis each time).
type results struct {
	deadlineSites memo[*DeadlineSites]
	connWrappers  memo[[]ConnWrapper]
}

// memo computes a value once, the first call's error kept with it.
type memo[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (m *memo[T]) get(f func() (T, error)) (T, error) {
	m.once.Do(func() { m.v, m.err = f() })
	return m.v, m.err
}

// Open opens and checks the Go executable at path. It refuses files that are
// not Go ELF executables (ErrNotGo), predate the register ABI (ErrGoTooOld),
// target another architecture (ErrUnsupportedArch) or are malformed
// (ErrCorrupt), with an *OpenError that says why.
func Open(path string) (*Binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &OpenError{Path: path, Kind: err}
	}
	b, err := newBinary(path, f, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if st, err := f.Stat(); err == nil {
		b.File = fileID(st)
		b.size = st.Size()
	}
	return b, nil
}

// newBinary parses r as a Go ELF executable. closer, if non-nil, is closed by
// Binary.Close.
func newBinary(path string, r io.ReaderAt, closer io.Closer) (b *Binary, err error) {
	refuse := func(kind error, format string, args ...any) (*Binary, error) {
		return nil, &OpenError{Path: path, Kind: kind, Reason: fmt.Sprintf(format, args...)}
	}
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return refuse(ErrNotGo, "not an ELF file")
	}
	ef, err := elf.NewFile(r)
	if err != nil {
		return refuse(ErrCorrupt, "parse ELF: %v", err)
	}
	b = &Binary{Path: path, ExePath: path, AttachPath: path, closer: closer, r: r, elf: ef, order: ef.ByteOrder}
	switch {
	case ef.Machine == elf.EM_X86_64 && ef.Class == elf.ELFCLASS64:
		b.Arch, b.ptr = "amd64", 8
	case ef.Machine == elf.EM_AARCH64 && ef.Class == elf.ELFCLASS64:
		b.Arch, b.ptr = "arm64", 8
	default:
		if !hasGoSections(ef) {
			return refuse(ErrNotGo, "%v %v executable without Go sections", ef.Class, ef.Machine)
		}
		return refuse(ErrUnsupportedArch, "ELF machine %v (%v); only amd64 and arm64 are supported", ef.Machine, ef.Class)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return refuse(ErrNotGo, "ELF type %v is not an executable", ef.Type)
	}
	b.PIE = ef.Type == elf.ET_DYN

	bi, err := readBuildInfo(r)
	if err != nil {
		if hasGoSections(ef) {
			return refuse(ErrCorrupt, "read build information: %v", err)
		}
		return refuse(ErrNotGo, "no Go build information (%v)", err)
	}
	b.GoVersion = bi.GoVersion
	major, minor, ok := goRelease(bi.GoVersion)
	if !ok {
		return refuse(ErrCorrupt, "unparsable Go version %q", bi.GoVersion)
	}
	if major == 1 && minor < minRegABIMinor(b.Arch) {
		return refuse(ErrGoTooOld, "%s on %s (need go1.%d or later)", bi.GoVersion, b.Arch, minRegABIMinor(b.Arch))
	}
	b.Main = Module{Path: bi.Main.Path, Version: bi.Main.Version}
	for _, d := range bi.Deps {
		m := Module{Path: d.Path, Version: d.Version}
		if r := d.Replace; r != nil {
			m.Replace = r.Path
			if r.Version != "" && r.Version != "(devel)" { // "(devel)": a directory
				m.Replace += "@" + r.Version
			}
		}
		b.Modules = append(b.Modules, m)
	}
	return b, nil
}

// readBuildInfo reads the Go build information, turning parser panics into
// errors.
func readBuildInfo(r io.ReaderAt) (bi *buildinfo.BuildInfo, err error) {
	defer recoverCorrupt(&err, "read build information")
	return buildinfo.Read(r)
}

// hasGoSections reports whether the ELF file has a section only the Go
// linker writes, which tells a damaged Go binary from a foreign one.
func hasGoSections(ef *elf.File) bool {
	for _, name := range []string{".go.buildinfo", ".gopclntab", ".note.go.buildid"} {
		if ef.Section(name) != nil {
			return true
		}
	}
	return false
}

// Close closes the executable file.
func (b *Binary) Close() error {
	if b.closer == nil {
		return nil
	}
	if err := b.closer.Close(); err != nil {
		return fmt.Errorf("close %s: %w", b.Path, err)
	}
	return nil
}

// FileOffset converts a virtual address of the executable to its offset in
// the file, using the loadable segment that contains it. Uprobes are placed
// by file offset (cilium/ebpf link.UprobeOptions.Address).
func (b *Binary) FileOffset(addr uint64) (uint64, error) {
	for _, p := range b.elf.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("find segment of address %#x: %w", addr, ErrNotFound)
}

// read returns n bytes of the file image at virtual address addr; the whole
// range must lie in the file part of one loadable segment.
func (b *Binary) read(addr, n uint64) ([]byte, error) {
	for _, p := range b.elf.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		if n > p.Filesz-(addr-p.Vaddr) {
			return nil, corruptf("range %#x+%d crosses the end of its segment", addr, n)
		}
		buf := make([]byte, n)
		if _, err := b.r.ReadAt(buf, int64(addr-p.Vaddr+p.Off)); err != nil {
			return nil, corruptf("read %d bytes at %#x: %v", n, addr, err)
		}
		return buf, nil
	}
	return nil, corruptf("address %#x is not in a loadable segment", addr)
}

// executable reports whether addr lies in an executable loadable segment.
func (b *Binary) executable(addr uint64) bool {
	for _, p := range b.elf.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return true
		}
	}
	return false
}

// sectionData returns the contents of the first present section among names.
func (b *Binary) sectionData(names ...string) (*elf.Section, []byte, error) {
	for _, name := range names {
		s := b.elf.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		if s.Size > 1<<31 {
			return nil, nil, corruptf("section %s is %d bytes", name, s.Size)
		}
		data, err := s.Data()
		if err != nil {
			return nil, nil, corruptf("read section %s: %v", name, err)
		}
		return s, data, nil
	}
	return nil, nil, fmt.Errorf("find section %v: %w", names, ErrNotFound)
}

// Size is the executable file's size in bytes (0 when unknown).
func (b *Binary) Size() int64 { return b.size }

// Release drops what analysing the binary loaded into memory: .symtab, the
// types section, the DWARF index, the pclntab's bytes and its name index. What
// symbolizing a PC needs stays (the pclntab is then read from the file a
// page at a time), and every method still answers, loading again what it
// needs; call Release again after such use. A node agent releases each
// executable once its probes are attached: kube-apiserver's tables alone
// are hundreds of MB in memory.
func (b *Binary) Release() {
	b.loadMu.Lock()
	b.symtab, b.symsErr, b.symsDone = nil, nil, false
	b.loadMu.Unlock()
	b.dwarfMu.Lock()
	b.dwarf, b.dwarfErr, b.dwarfDone = nil, nil, false
	b.dwarfMu.Unlock()
	b.typesMu.Lock()
	b.types, b.typesErr, b.typesDone = nil, nil, false
	b.typesMu.Unlock()
	if p, err := b.lineTable(); err == nil && p.funcs != nil {
		p.funcs.release()
	}
}

// uintptr decodes a target pointer-sized word.
func (b *Binary) uintptr(p []byte) uint64 {
	if b.ptr == 4 {
		return uint64(b.order.Uint32(p))
	}
	return b.order.Uint64(p)
}

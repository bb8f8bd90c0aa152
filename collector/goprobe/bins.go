package goprobe

import (
	"fmt"
	"os"
	"syscall"

	"github.com/timeout-tracer/tracer/gobin"
)

// binRef is an analysed executable and the number of processes using it:
// its symbol tables, pclntab and DWARF are parsed once per file.
type binRef struct {
	bin  *gobin.Binary
	refs int
}

// openBin returns the analysed executable of process pid, shared with the
// other processes running the same file, and the path to attach this
// process's own probes through.
func (n *Node) openBin(pid int) (*gobin.Binary, string, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if st, err := os.Stat(exe); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			id := gobin.FileID{Dev: uint64(sys.Dev), Ino: uint64(sys.Ino)}
			n.mu.Lock()
			if r, ok := n.bins[id]; ok {
				r.refs++
				n.mu.Unlock()
				return r.bin, exe, nil
			}
			n.mu.Unlock()
		}
	}
	bin, err := gobin.OpenPID(pid)
	if err != nil {
		return nil, "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.bins[bin.File]; ok { // another process of the file won the race
		r.refs++
		bin.Close()
		return r.bin, exe, nil
	}
	n.bins[bin.File] = &binRef{bin: bin, refs: 1}
	return bin, bin.AttachPath, nil
}

// closeBin drops a process's reference on its executable.
func (n *Node) closeBin(b *gobin.Binary) error {
	if b == nil {
		return nil
	}
	n.mu.Lock()
	r, ok := n.bins[b.File]
	if ok && r.bin == b {
		r.refs--
		if r.refs > 0 {
			n.mu.Unlock()
			return nil
		}
		delete(n.bins, b.File)
	}
	n.mu.Unlock()
	return b.Close()
}

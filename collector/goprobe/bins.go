package goprobe

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/timeout-tracer/tracer/gobin"
)

// binRef is an analysed executable and the number of processes using it:
// its symbol tables, pclntab and DWARF are parsed once per file.
type binRef struct {
	bin   *gobin.Binary
	refs  int
	stamp fileStamp
	// idle: when its last process went (zero while it has one). An idle
	// executable stays open a while for the next process of the file.
	idle time.Time
	// warm: the analysis tables are kept loaded (not Released) until then.
	warm time.Time
}

// fileStamp tells whether an idle executable's file was rewritten in
// place (cp over it keeps the inode) since it was analysed.
type fileStamp struct {
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(st *syscall.Stat_t) fileStamp {
	return fileStamp{size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// The node agent's executable cache. Analysing an executable for a new
// process costs 0.3-0.9 s of CPU here (grpc_health_probe, 18 MB, with a
// CI run beside it), most of it loading the tables that Release drops
// after the attach; a one-shot program run every few seconds (an exec
// health probe, a cron job) paid it on every run, and its expiries before
// the attach were not seen. So, in the node agent:
//   - an executable whose last process exited stays open (its tables
//     released) for idleLinger, at most maxIdle of them;
//   - the tables of an executable of at most warmMaxSize bytes stay loaded
//     for warmFor after each attach, while the files of the executables
//     kept so add up to at most warmBudget bytes (the tables take about
//     half the file's size in memory: 9.8 MB for grpc_health_probe's
//     18 MB, 11 MB for otel-cli's 21 MB), so at most ~48 MB of the agent's
//     memory (grpcurl is 39 MB); a large server's (kube-apiserver's
//     100 MB) never stay.
const (
	idleLinger  = 2 * time.Minute
	maxIdle     = 16
	warmFor     = 30 * time.Second
	warmMaxSize = 48 << 20
	warmBudget  = 96 << 20
)

// openBin returns the analysed executable of process pid, shared with the
// other processes running the same file, and the path to attach this
// process's own probes through.
func (n *Node) openBin(pid int) (*gobin.Binary, string, error) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	var stamp fileStamp
	if st, err := os.Stat(exe); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			stamp = stampOf(sys)
			id := gobin.FileID{Dev: uint64(sys.Dev), Ino: uint64(sys.Ino)}
			var stale *gobin.Binary
			n.mu.Lock()
			r, ok := n.bins[id]
			if ok && r.refs == 0 && r.stamp != stamp {
				// Rewritten in place while no process ran it.
				delete(n.bins, id)
				stale, ok = r.bin, false
			}
			if ok {
				r.refs++
				r.idle = time.Time{}
				n.mu.Unlock()
				return r.bin, exe, nil
			}
			n.mu.Unlock()
			if stale != nil {
				stale.Close()
			}
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
		r.idle = time.Time{}
		bin.Close()
		return r.bin, exe, nil
	}
	n.bins[bin.File] = &binRef{bin: bin, refs: 1, stamp: stamp}
	return bin, bin.AttachPath, nil
}

// closeBin drops a process's reference on its executable. The node
// agent's stays open a while (idleLinger); a single process's closes.
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
		if n.shared.Load() && !n.closing {
			r.idle = time.Now()
			n.mu.Unlock()
			return nil
		}
		delete(n.bins, b.File)
	}
	n.mu.Unlock()
	return b.Close()
}

// ReleaseAnalysis says that process p's probes are attached: what the
// analysis of its executable loaded may go (gobin.Binary.Release). In the
// node agent a small executable's tables stay loaded for warmFor, for the
// next process of the file.
func (p *Process) ReleaseAnalysis() {
	n := p.node
	n.mu.Lock()
	r, ok := n.bins[p.bin.File]
	if ok && r.bin == p.bin && n.shared.Load() && !n.closing && p.bin.Size() > 0 && p.bin.Size() <= warmMaxSize {
		warm := p.bin.Size()
		for _, o := range n.bins {
			if o != r && !o.warm.IsZero() {
				warm += o.bin.Size()
			}
		}
		if warm <= warmBudget {
			r.warm = time.Now().Add(warmFor)
			n.mu.Unlock()
			return
		}
	}
	n.mu.Unlock()
	p.bin.Release()
}

// sweepBins releases the tables no longer warm and closes the executables
// idle past idleLinger, or beyond maxIdle (the longest idle first).
func (n *Node) sweepBins(now time.Time) {
	var release, closing []*gobin.Binary
	n.mu.Lock()
	var idle []*binRef
	for id, r := range n.bins {
		if !r.warm.IsZero() && now.After(r.warm) {
			r.warm = time.Time{}
			release = append(release, r.bin)
		}
		if r.refs > 0 {
			continue
		}
		if now.Sub(r.idle) > idleLinger {
			delete(n.bins, id)
			closing = append(closing, r.bin)
			continue
		}
		idle = append(idle, r)
	}
	for len(idle) > maxIdle {
		oldest := 0
		for i, r := range idle {
			if r.idle.Before(idle[oldest].idle) {
				oldest = i
			}
		}
		delete(n.bins, idle[oldest].bin.File)
		closing = append(closing, idle[oldest].bin)
		idle = append(idle[:oldest], idle[oldest+1:]...)
	}
	n.mu.Unlock()
	for _, b := range release {
		b.Release()
	}
	for _, b := range closing {
		if err := b.Close(); err != nil {
			n.log.Debug("close an idle executable", "err", err)
		}
	}
}

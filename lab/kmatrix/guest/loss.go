package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"golang.org/x/sys/unix"
)

// The loss is made with a BPF program of the test's own rather than
// iptables: the guest kernels have their netfilter modules on disk only, and
// a guest would need an iptables built for its architecture. A cgroup_skb
// ingress program on the cgroup of the receiving process drops every
// segment to its port once attached, so the sender sees no ACK: a blackhole
// after the handshake, as in the fault lab. Dropping on the sender's egress
// would not do: the sender would see a local error and never retransmit
// on a timer.
//
// This is test infrastructure, hence the exception to "only collector/
// imports cilium/ebpf": the program is a dozen instructions, assembled here.

// cgroup is a cgroup v2 directory of the test's own.
type cgroup struct {
	path string
	fd   int
}

// newCgroup creates a fresh child of the cgroup2 root.
func newCgroup() (*cgroup, error) {
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, fmt.Sprintf("tt-kmatrix-%d", os.Getpid()))
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &cgroup{path: path, fd: fd}, nil
}

// Close removes the cgroup; its processes must have exited.
func (c *cgroup) Close() error {
	unix.Close(c.fd)
	return os.Remove(c.path)
}

// cgroup2Root finds where the unified hierarchy is mounted.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
				return f[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 hierarchy mounted")
}

// dropper drops the packets to one local port of a cgroup's sockets while
// it is attached.
type dropper struct {
	count *ebpf.Map
	prog  *ebpf.Program
	link  link.Link
}

// skbLocalPort is offsetof(struct __sk_buff, local_port): the socket's
// port in host byte order, stable UAPI.
const skbLocalPort = 136

// startDrop attaches the drop program to the cgroup's ingress.
func startDrop(cg *cgroup, port uint16) (_ *dropper, err error) {
	d := &dropper{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.count, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create drop counter: %w", err)
	}
	d.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:       "tt_kmatrix_drop",
		Type:       ebpf.CGroupSKB,
		AttachType: ebpf.AttachCGroupInetIngress,
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, skbLocalPort, asm.Word),
			asm.JNE.Imm(asm.R2, int32(port), "pass"),
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, d.count.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "drop"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"), // 0: drop
			asm.Return(),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // 1: let through
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load drop program: %w", err)
	}
	d.link, err = link.AttachCgroup(link.CgroupOptions{Path: cg.path, Attach: ebpf.AttachCGroupInetIngress, Program: d.prog})
	if err != nil {
		return nil, fmt.Errorf("attach drop program to %s: %w", cg.path, err)
	}
	return d, nil
}

// Dropped returns how many packets the program dropped.
func (d *dropper) Dropped() uint64 {
	var n uint64
	d.count.Lookup(uint32(0), &n)
	return n
}

// Close detaches the program and frees it.
func (d *dropper) Close() error {
	var errs []error
	if d.link != nil {
		errs = append(errs, d.link.Close())
	}
	if d.prog != nil {
		errs = append(errs, d.prog.Close())
	}
	if d.count != nil {
		errs = append(errs, d.count.Close())
	}
	return errors.Join(errs...)
}

package netlab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/lab/testenv"
)

// netnsDir is where ip netns keeps its named namespaces.
const netnsDir = "/run/netns"

// maxIfName is IFNAMSIZ minus the terminating NUL.
const maxIfName = 15

// readyTimeout bounds the wait for links and addresses to become usable.
const readyTimeout = 5 * time.Second

// pairCounter numbers the Pairs of this process; with the pid it makes names unique.
var pairCounter atomic.Uint64

// Pair is a client and a server network namespace joined by a veth pair, each end with an
// IPv4 and an IPv6 address. Create it with NewPair; the test's cleanup removes it.
//
// Names and subnets are unique among all Pairs alive on the machine, also across
// concurrently running test processes, so a kernel-wide tracer can tell the traffic of one
// Pair from another's by address.
type Pair struct {
	// ClientNS and ServerNS are the names of the namespaces, as ip netns knows them:
	// "tt" + pid + "-" + a per-process counter in base 36, with "c" or "s" appended.
	ClientNS, ServerNS string
	// ClientDev and ServerDev are the veth ends inside the namespaces. They carry the same
	// names as their namespaces, which keeps them within IFNAMSIZ and easy to find.
	ClientDev, ServerDev string
	// ClientAddr and ServerAddr are the IPv4 addresses of the two ends, in one /30.
	ClientAddr, ServerAddr netip.Addr
	// ClientAddr6 and ServerAddr6 are the IPv6 addresses (ULA, one /64). They are added
	// with nodad, so they are usable as soon as NewPair returns.
	ClientAddr6, ServerAddr6 netip.Addr

	tb       testing.TB
	slot     int
	slotHold *net.UnixConn

	mu     sync.Mutex // guards shaped
	shaped bool       // a tbf qdisc is installed on ServerDev
}

// NewPair creates a client and a server namespace joined by a veth pair, with addresses
// assigned and all links up, and registers a t.Cleanup that removes both namespaces.
// It skips the test unless it runs as root with the ip command available, and fails the
// test if the lab cannot be built.
//
// Call NewPair from a goroutine that is not inside InClient or InServer: it claims the
// Pair's subnet in the host's network namespace.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	testenv.Root(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("netlab: needs the ip command from iproute2: %v", err)
	}
	p, err := newPair(t)
	if err != nil {
		t.Fatalf("netlab: %v", err)
	}
	return p
}

func newPair(t testing.TB) (*Pair, error) {
	t.Helper()
	n := pairCounter.Add(1)
	pid := os.Getpid()
	base := pairBase(pid, n)
	if len(base)+1 > maxIfName {
		return nil, fmt.Errorf("name pair %d: %q is too long for an interface name", n, base+"c")
	}
	// Spreading the first slot tried by pid and counter keeps concurrent processes from
	// contending for the same slots and keeps a process from reusing a subnet at once.
	slot, hold, err := claimSlot((pid*64 + int(n)) % slotCount)
	if err != nil {
		return nil, err
	}
	p := &Pair{
		ClientNS:  base + "c",
		ServerNS:  base + "s",
		ClientDev: base + "c",
		ServerDev: base + "s",
		tb:        t,
		slot:      slot,
		slotHold:  hold,
	}
	p.ClientAddr, p.ServerAddr, p.ClientAddr6, p.ServerAddr6 = slotAddrs(slot)
	// Cleanup cannot run when the test binary dies (go test -timeout, SIGKILL), so each
	// new Pair removes what dead processes left.
	for _, ns := range removeStale() {
		t.Logf("netlab: removed namespace %s left by a process that is gone", ns)
	}
	// Registered before anything exists, so that a failure halfway still removes whatever
	// was made.
	t.Cleanup(func() {
		if err := p.destroy(); err != nil {
			t.Errorf("netlab: %v", err)
		}
	})
	if err := p.create(); err != nil {
		return nil, fmt.Errorf("create pair %s/%s: %w", p.ClientNS, p.ServerNS, err)
	}
	return p, nil
}

// pairBase names the n-th Pair of process pid. Base 36 keeps names within IFNAMSIZ for
// over a million Pairs even with a seven-digit pid.
func pairBase(pid int, n uint64) string {
	return "tt" + strconv.Itoa(pid) + "-" + strconv.FormatUint(n, 36)
}

func (p *Pair) create() error {
	for _, ns := range []string{p.ClientNS, p.ServerNS} {
		// A namespace with our name can only be left over from a dead process that had
		// our pid: the live owner of this pid is us, and we have not made it yet.
		if err := removeNetns(ns); err != nil {
			return err
		}
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	// Creating both ends directly inside the namespaces means the host's own namespace
	// never sees them, not even for a moment.
	if err := run("ip", "link", "add", p.ClientDev, "netns", p.ClientNS, "type", "veth",
		"peer", "name", p.ServerDev, "netns", p.ServerNS); err != nil {
		return err
	}
	ends := []struct {
		ns, dev string
		v4, v6  netip.Addr
	}{
		{p.ClientNS, p.ClientDev, p.ClientAddr, p.ClientAddr6},
		{p.ServerNS, p.ServerDev, p.ServerAddr, p.ServerAddr6},
	}
	for _, e := range ends {
		steps := [][]string{
			{"-n", e.ns, "addr", "add", netip.PrefixFrom(e.v4, 30).String(), "dev", e.dev},
			// Without nodad the address stays tentative for a second or more and
			// connects fail with EADDRNOTAVAIL.
			{"-n", e.ns, "-6", "addr", "add", netip.PrefixFrom(e.v6, 64).String(), "dev", e.dev, "nodad"},
			{"-n", e.ns, "link", "set", "lo", "up"},
			{"-n", e.ns, "link", "set", e.dev, "up"},
		}
		for _, args := range steps {
			if err := run("ip", args...); err != nil {
				return err
			}
		}
	}
	for _, e := range ends {
		if err := waitReady(e.ns, e.dev, e.v6); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits until dev is operationally up (which for a veth needs both ends up) and
// addr6 is on it and not tentative.
func waitReady(ns, dev string, addr6 netip.Addr) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ok, err := linkReady(ns, dev, addr6)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for %s in %s: not up with %s usable after %v", dev, ns, addr6, readyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func linkReady(ns, dev string, addr6 netip.Addr) (bool, error) {
	out, err := output("ip", "-j", "-n", ns, "addr", "show", "dev", dev)
	if err != nil {
		return false, err
	}
	var links []struct {
		OperState string `json:"operstate"`
		AddrInfo  []struct {
			Local     string `json:"local"`
			Tentative bool   `json:"tentative"`
			DADFailed bool   `json:"dadfailed"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return false, fmt.Errorf("parse ip -j addr show of %s in %s: %w", dev, ns, err)
	}
	if len(links) != 1 || links[0].OperState != "UP" {
		return false, nil
	}
	for _, a := range links[0].AddrInfo {
		if a.Local == addr6.String() {
			return !a.Tentative && !a.DADFailed, nil
		}
	}
	return false, nil
}

// destroy removes both namespaces, which takes the veth pair, the iptables rules and the
// qdiscs with them, and then releases the subnet slot.
func (p *Pair) destroy() error {
	var errs []error
	for _, ns := range []string{p.ClientNS, p.ServerNS} {
		errs = append(errs, removeNetns(ns))
	}
	errs = append(errs, p.slotHold.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove pair %s/%s: %w", p.ClientNS, p.ServerNS, err)
	}
	return nil
}

// removeNetns deletes a named namespace if it exists.
func removeNetns(ns string) error {
	path := filepath.Join(netnsDir, ns)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := run("ip", "netns", "del", ns)
	if _, serr := os.Stat(path); err != nil && errors.Is(serr, os.ErrNotExist) {
		// Another process's removeStale got there first.
		return nil
	}
	return err
}

// removeStale removes the namespaces of Pairs whose process no longer exists and returns
// their names. It is best effort: a namespace it cannot remove is left for the next try.
// A process in another pid namespace that shares /run/netns would look dead; test
// containers have their own /run.
func removeStale() []string {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		pid, ok := pairOwner(e.Name())
		if !ok || pid == os.Getpid() || !errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			continue
		}
		if removeNetns(e.Name()) == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed
}

// pairOwner returns the pid in a namespace name made by pairBase, "tt" pid "-" counter
// and "c" or "s", and whether the name has that form.
func pairOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "tt")
	if !ok {
		return 0, false
	}
	pidText, counter, ok := strings.Cut(rest, "-")
	if !ok || len(counter) < 2 || !strings.ContainsAny(counter[len(counter)-1:], "cs") {
		return 0, false
	}
	if _, err := strconv.ParseUint(counter[:len(counter)-1], 36, 64); err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidText {
		return 0, false
	}
	return pid, true
}

package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/timeout-tracer/tracer/lab/testenv"
)

func TestEcho(t *testing.T) {
	for _, network := range families {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			p := NewPair(t)
			addr := startEcho(t, p, network, 0)
			c := dial(t, p, network, addr)
			if err := roundTrip(c, []byte("hello "+network), 5*time.Second); err != nil {
				t.Fatal(err)
			}
			// The connection runs between the two veth ends, not over some loopback.
			local := netip.MustParseAddrPort(c.LocalAddr().String()).Addr()
			if want := clientAddr(p, network); local != want {
				t.Errorf("local address %v, want the client's %v", local, want)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	for _, network := range families {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			p := NewPair(t)
			addr := netip.AddrPortFrom(serverAddr(p, network), freePort(t, p, network))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := p.Dial(ctx, network, addr.String())
			wantErrno(t, err, unix.ECONNREFUSED)
		})
	}
}

// TestParallelPairs creates several Pairs at once, all serving the same port, and checks
// that their names and subnets differ, that each works and that one cannot reach another.
func TestParallelPairs(t *testing.T) {
	testenv.Root(t)
	const n = 4
	pairs := make([]*Pair, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { pairs[i], errs[i] = newPair(t) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]string)
	for _, p := range pairs {
		for _, key := range []string{p.ClientNS, p.ServerNS, p.ClientAddr.String(), p.ServerAddr.String(),
			p.ClientAddr6.String(), p.ServerAddr6.String()} {
			if owner, dup := seen[key]; dup {
				t.Errorf("%s used by both %s and %s", key, owner, p.ClientNS)
			}
			seen[key] = p.ClientNS
		}
	}
	for _, p := range pairs {
		for _, network := range families {
			addr := startEcho(t, p, network, 8080)
			if err := roundTrip(dial(t, p, network, addr), []byte(p.ClientNS), 5*time.Second); err != nil {
				t.Errorf("%s over %s: %v", p.ClientNS, network, err)
			}
		}
	}
	for _, p := range pairs {
		for _, other := range pairs {
			if other == p {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := p.Dial(ctx, "tcp6", netip.AddrPortFrom(other.ServerAddr6, 8080).String())
			cancel()
			if !errors.Is(err, unix.ENETUNREACH) {
				t.Errorf("dial from %s to %s: got %v, want ENETUNREACH", p.ClientNS, other.ServerNS, err)
			}
		}
	}
}

// TestCleanupRemovesEverything checks that a finished test leaves no namespace behind and
// gives its subnet back.
func TestCleanupRemovesEverything(t *testing.T) {
	testenv.Root(t)
	var p *Pair
	t.Run("pair", func(t *testing.T) {
		p = NewPair(t)
		startEcho(t, p, "tcp4", 0)
		if err := p.Blackhole(80); err != nil {
			t.Fatal(err)
		}
		if err := p.Shape("10mbit", "16k", "50ms"); err != nil {
			t.Fatal(err)
		}
	})
	if p == nil {
		t.Fatal("the pair was not created")
	}
	wantGone(t, p.ClientNS, p.ServerNS)
	hold, err := holdSlot(p.slot)
	if err != nil {
		t.Fatalf("slot %d still taken after cleanup: %v", p.slot, err)
	}
	hold.Close()
}

// TestCleanupAfterFailure runs a test that fails (or panics) with a Pair in a child
// process and checks that its namespaces are gone afterwards. The modes run one after the
// other: a Pair made meanwhile would sweep a dead child's namespaces and hide a failure.
func TestCleanupAfterFailure(t *testing.T) {
	testenv.Root(t)
	for _, mode := range []string{"fatal", "panic"} {
		t.Run(mode, func(t *testing.T) {
			cmd := helperCmd(t, mode)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the failing helper passed:\n%s", out)
			}
			names := reportedPair(string(out))
			if names == nil {
				t.Fatalf("the helper did not report its pair:\n%s", out)
			}
			wantGone(t, names...)
		})
	}
}

// TestStaleNamespacesAreRemoved kills a child process with a Pair open, so that its
// cleanup cannot run, as when go test times out, and checks that the next Pair removes
// what the child left.
func TestStaleNamespacesAreRemoved(t *testing.T) {
	testenv.Root(t)
	cmd := helperCmd(t, "hang")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var names []string
	sc := bufio.NewScanner(stdout)
	for names == nil && sc.Scan() {
		names = reportedPair(sc.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if names == nil {
		t.Fatal("the helper did not report its pair")
	}
	for _, ns := range names {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
			t.Fatalf("the killed helper's namespace %s is already gone: %v", ns, err)
		}
	}
	NewPair(t)
	wantGone(t, names...)
}

// helperCmd returns a command that runs TestFailingHelper in a child process.
func helperCmd(t *testing.T, mode string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFailingHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "NETLAB_FAILING_HELPER="+mode)
	return cmd
}

// reportedPair returns the namespace names that TestFailingHelper printed, or nil.
func reportedPair(out string) []string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "netlab-pair "); ok {
			if names := strings.Fields(rest); len(names) == 2 {
				return names
			}
		}
	}
	return nil
}

// TestFailingHelper is the child process of TestCleanupAfterFailure and
// TestStaleNamespacesAreRemoved; it does nothing in a normal run.
func TestFailingHelper(t *testing.T) {
	mode := os.Getenv("NETLAB_FAILING_HELPER")
	if mode == "" {
		t.Skip("only runs as the child of TestCleanupAfterFailure")
	}
	p := NewPair(t)
	fmt.Printf("netlab-pair %s %s\n", p.ClientNS, p.ServerNS)
	if err := p.Blackhole(80); err != nil {
		t.Error(err)
	}
	switch mode {
	case "panic":
		panic("intentional panic with a pair open")
	case "hang":
		time.Sleep(time.Minute)
	}
	t.Fatal("intentional failure with a pair open")
}

// wantGone fails unless the named namespaces are gone from /run/netns and ip netns list.
func wantGone(t *testing.T, names ...string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	listed := make(map[string]bool)
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for _, ns := range names {
		if listed[ns] {
			t.Errorf("namespace %s is still in ip netns list", ns)
		}
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s is still in %s: %v", ns, netnsDir, err)
		}
	}
}

// TestLeftoverNamespaceIsReplaced plants a namespace under the name the next Pair will
// take, as a crashed earlier process with the same pid would have, and checks that
// NewPair replaces it. It must not run in parallel: it predicts the next counter value.
func TestLeftoverNamespaceIsReplaced(t *testing.T) {
	testenv.Root(t)
	name := pairBase(os.Getpid(), pairCounter.Load()+1) + "c"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("plant %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { removeNetns(name) })
	if out, err := exec.Command("ip", "-n", name, "link", "add", "leftover0", "type", "veth", "peer", "name", "leftover1").CombinedOutput(); err != nil {
		t.Fatalf("mark %s: %v: %s", name, err, out)
	}
	p := NewPair(t)
	if p.ClientNS != name {
		t.Fatalf("client namespace %s, want the planted %s", p.ClientNS, name)
	}
	out, err := exec.Command("ip", "-n", name, "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("list links of %s: %v: %s", name, err, out)
	}
	if strings.Contains(string(out), "leftover0") {
		t.Errorf("%s is still the planted namespace:\n%s", name, out)
	}
}

// TestInNetnsRestoresThread checks that fn runs in the namespace and that the thread is
// back in its own namespace afterwards, also when fn fails or panics.
func TestInNetnsRestoresThread(t *testing.T) {
	p := NewPair(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home := threadNetns(t)
	var client, server fileID
	if err := p.InClient(func() error { client = threadNetns(t); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := statID(t, filepath.Join(netnsDir, p.ClientNS)); client != want {
		t.Errorf("InClient ran in %v, want %s at %v", client, p.ClientNS, want)
	}
	errFn := errors.New("fn failed")
	if err := p.InServer(func() error { server = threadNetns(t); return errFn }); !errors.Is(err, errFn) {
		t.Errorf("InServer returned %v, want fn's error", err)
	}
	if want := statID(t, filepath.Join(netnsDir, p.ServerNS)); server != want {
		t.Errorf("InServer ran in %v, want %s at %v", server, p.ServerNS, want)
	}
	func() {
		defer func() { recover() }()
		p.InClient(func() error { panic("in fn") })
	}()
	if got := threadNetns(t); got != home {
		t.Errorf("thread is in %v after InClient/InServer, want its own %v", got, home)
	}
}

type fileID struct{ dev, ino uint64 }

func threadNetns(t *testing.T) fileID {
	return statID(t, "/proc/thread-self/ns/net")
}

func statID(t *testing.T, path string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return fileID{st.Dev, st.Ino}
}

func TestSysctl(t *testing.T) {
	p := NewPair(t)
	const key, path = "net.ipv4.tcp_syn_retries", "/proc/sys/net/ipv4/tcp_syn_retries"
	host, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	server := readIn(t, p.ServerCmd(context.Background(), "cat", path))
	want := "1"
	if server == want {
		want = "2"
	}
	if err := p.Sysctl(p.ClientNS, key, want); err != nil {
		t.Fatal(err)
	}
	if got := readIn(t, p.ClientCmd(context.Background(), "cat", path)); got != want {
		t.Errorf("%s in the client namespace is %s, want %s", key, got, want)
	}
	if got := readIn(t, p.ServerCmd(context.Background(), "cat", path)); got != server {
		t.Errorf("%s in the server namespace changed from %s to %s", key, server, got)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != string(host) {
		t.Errorf("%s on the host changed from %q to %q (%v)", key, host, got, err)
	}
}

func readIn(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return strings.TrimSpace(string(out))
}

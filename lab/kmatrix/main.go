// Command kmatrix is the kernel matrix (make kmatrix): it boots Debian's
// kernels for amd64 and arm64 under qemu (TCG, one CPU) with the guest
// checks (lab/kmatrix/guest) as /init, runs the same checks on the
// host kernel, and prints kernel × arch × check → pass/fail. It exits
// non-zero when any check fails or any guest does not finish.
//
// Kernel packages are downloaded with apt-get into -cache (outside the
// repository, reused across runs); by default the newest plain image of
// each -series for each -arch that apt knows. It needs root (the checks
// load BPF), qemu-system-x86, qemu-system-arm and arm64 added to dpkg's
// architectures: .ci/deps installs all of it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	cache     string
	series    string
	arches    string
	kernels   string
	host      bool
	timeout   time.Duration
	parallel  int
	verbose   bool
	echo      bool
	keep      bool
	guestArgs string
}

func main() {
	var o options
	flag.StringVar(&o.cache, "cache", "/var/cache/tt-kmatrix", "where kernel packages, extracted kernels and console logs are kept")
	flag.StringVar(&o.series, "series", "6.1,6.12", "kernel series to boot, newest package of each (comma-separated)")
	flag.StringVar(&o.arches, "arch", "amd64,arm64", "guest architectures (comma-separated)")
	flag.StringVar(&o.kernels, "kernels", "", "exact kernel image packages instead of -series (comma-separated, e.g. linux-image-6.1.0-57-arm64)")
	flag.BoolVar(&o.host, "host", true, "also run the checks on the host kernel")
	flag.DurationVar(&o.timeout, "timeout", 300*time.Second, "per guest: boot, checks and power-off")
	flag.IntVar(&o.parallel, "parallel", runtime.NumCPU(), "guests booted at once (one emulated CPU each)")
	flag.BoolVar(&o.verbose, "v", false, "print every check's detail, not only failures")
	flag.BoolVar(&o.echo, "console", false, "echo the consoles while they run")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (built programs, initramfs images)")
	flag.StringVar(&o.guestArgs, "guest-args", "", "extra flags for the guest checks (space-separated)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := matrix(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kmatrix:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kmatrix: "+format+"\n", args...)
}

// matrix runs everything and prints the table; the code is 1 when anything
// failed.
func matrix(ctx context.Context, o options) (int, error) {
	start := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return 0, err
	}
	kernels, err := prepareKernels(o)
	if err != nil {
		return 0, err
	}
	work, err := os.MkdirTemp("", "tt-kmatrix-")
	if err != nil {
		return 0, err
	}
	if o.keep {
		logf("work directory %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	logs := filepath.Join(o.cache, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return 0, err
	}

	arches := []string{}
	for _, k := range kernels {
		if !slices.Contains(arches, k.Arch) {
			arches = append(arches, k.Arch)
		}
	}
	if o.host && !slices.Contains(arches, runtime.GOARCH) {
		arches = append(arches, runtime.GOARCH)
	}
	for _, a := range arches {
		logf("building the guest programs for %s", a)
		if err := buildGuest(root, a, filepath.Join(work, a)); err != nil {
			return 0, err
		}
	}
	guestArgs := strings.Fields(o.guestArgs)

	var runs []*run
	if o.host {
		r := &run{Label: hostLabel(), Where: "host"}
		logf("running the checks on the host kernel")
		cmd := exec.CommandContext(ctx, filepath.Join(work, runtime.GOARCH, "guest"),
			append([]string{"-bin", filepath.Join(work, runtime.GOARCH)}, guestArgs...)...)
		runConsole(ctx, r, cmd, filepath.Join(logs, "host.log"), echoTo(o.echo), o.timeout)
		logf("host: %s", summary(r))
		runs = append(runs, r)
	}

	guests := make([]*run, len(kernels))
	sem := make(chan struct{}, max(1, o.parallel))
	var wg sync.WaitGroup
	for i, k := range kernels {
		r := &run{Label: k.Upstream() + " " + k.Arch, Where: "qemu"}
		guests[i] = r
		initrd := filepath.Join(work, k.Release+".cpio.gz")
		if err := writeInitramfs(initrd, guestFiles(filepath.Join(work, k.Arch), k)); err != nil {
			return 0, fmt.Errorf("initramfs for %s: %w", k.Release, err)
		}
		bin, args, err := qemuArgs(k.Arch, k.Vmlinuz, initrd, guestArgs)
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			logf("booting %s (%s) under qemu", r.Label, k.Pkg)
			runConsole(ctx, r, exec.Command(bin, args...), filepath.Join(logs, k.Release+".log"), echoTo(o.echo), o.timeout)
			logf("%s: %s", r.Label, summary(r))
		}()
	}
	wg.Wait()
	runs = append(guests, runs...)

	fmt.Printf("\nkernel matrix: %d kernels under qemu (TCG, 1 CPU) + host, %s\n\n", len(kernels), time.Since(start).Round(time.Second))
	printTable(os.Stdout, runs, o.verbose)
	for _, r := range runs {
		if r.failed() {
			return 1, nil
		}
	}
	return 0, nil
}

// prepareKernels picks the kernels and makes sure each is downloaded and
// extracted. A download that fails is retried once after apt-get update:
// the mirror drops superseded kernels, and apt's lists may be older.
func prepareKernels(o options) ([]kernel, error) {
	var kernels []kernel
	var err error
	for attempt := 0; ; attempt++ {
		kernels, err = pickOrList(o)
		if err == nil {
			for i := range kernels {
				if err = fetchKernel(o.cache, &kernels[i]); err != nil {
					break
				}
			}
		}
		if err == nil || attempt > 0 {
			break
		}
		logf("%v; running apt-get update and trying again", err)
		if _, uerr := command("apt-get", "update", "-qq"); uerr != nil {
			return nil, fmt.Errorf("%w (and %w)", err, uerr)
		}
	}
	if err != nil {
		return nil, err
	}
	if o.kernels == "" {
		pruneCache(o.cache, kernels)
	}
	slices.SortStableFunc(kernels, func(a, b kernel) int {
		if c := compareVersions(a.Upstream(), b.Upstream()); c != 0 {
			return c
		}
		return strings.Compare(a.Arch, b.Arch)
	})
	for _, k := range kernels {
		logf("kernel %s %s (%s)", k.Pkg, k.Version, filepath.Base(k.Deb))
	}
	return kernels, nil
}

func pickOrList(o options) ([]kernel, error) {
	if o.kernels != "" {
		return explicitKernels(splitList(o.kernels))
	}
	return aptKernels(splitList(o.series), splitList(o.arches))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// hostLabel is the host kernel's version and arch, e.g. "6.18.44 amd64".
func hostLabel() string {
	var uts syscall.Utsname
	rel := "unknown"
	if syscall.Uname(&uts) == nil {
		b := make([]byte, 0, len(uts.Release))
		for _, c := range uts.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		rel, _, _ = strings.Cut(string(b), "-")
	}
	return rel + " " + runtime.GOARCH
}

func echoTo(on bool) io.Writer {
	if on {
		return os.Stderr
	}
	return nil
}

func summary(r *run) string {
	n := map[string]int{}
	for _, c := range r.Checks {
		n[c.Result]++
	}
	s := fmt.Sprintf("%d pass, %d known, %d fail in %s", n["pass"], n["known"], len(r.Checks)-n["pass"]-n["known"], r.Elapsed.Round(time.Second))
	if r.Err != nil {
		s += " (" + r.Err.Error() + ")"
	}
	return s
}

// compareVersions orders dotted version numbers numerically (6.1.192 < 6.12.117).
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x - y
		}
	}
	return len(as) - len(bs)
}

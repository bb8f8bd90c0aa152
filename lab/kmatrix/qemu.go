package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// qemuArgs returns the command that boots a kernel with an initramfs under
// TCG. /dev/kvm on the development machines cannot boot stock kernels, and
// with two vCPUs a TCG guest locked up once: one CPU, software emulation.
func qemuArgs(arch, vmlinuz, initrd string, guestArgs []string) (string, []string, error) {
	var bin, console string
	var machine []string
	switch arch {
	case "amd64":
		bin, console = "qemu-system-x86_64", "ttyS0"
		machine = []string{"-cpu", "max"}
	case "arm64":
		// pauth-impdef: QEMU's cheap pointer-authentication hash; the
		// architected one is very slow to emulate.
		bin, console = "qemu-system-aarch64", "ttyAMA0"
		machine = []string{"-M", "virt", "-cpu", "max,pauth-impdef=on"}
	default:
		return "", nil, fmt.Errorf("no qemu for arch %q", arch)
	}
	appendLine := "console=" + console + " panic=-1 quiet rdinit=/init"
	if len(guestArgs) > 0 {
		appendLine += " -- " + strings.Join(guestArgs, " ")
	}
	args := append(machine,
		"-accel", "tcg", "-smp", "1", "-m", "1024",
		"-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", vmlinuz, "-initrd", initrd, "-append", appendLine)
	return bin, args, nil
}

// runConsole runs a command whose output carries KMATRIX lines (a qemu
// console or the guest binary on the host), copies everything to logPath
// and, with echo, to echo; it kills the command at the timeout or once the
// DONE marker has been seen and the command lingers.
func runConsole(ctx context.Context, r *run, cmd *exec.Cmd, logPath string, echo io.Writer, timeout time.Duration) {
	start := time.Now()
	defer func() { r.Elapsed = time.Since(start) }()
	r.Log = logPath
	logf, err := os.Create(logPath)
	if err != nil {
		r.finish(err)
		return
	}
	defer logf.Close()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr, cmd.Stdin = pw, pw, nil
	fmt.Fprintf(logf, "# %s\n", strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		r.finish(fmt.Errorf("start %s: %w", cmd.Path, err))
		return
	}
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		waited <- err
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
	}()

	kill := time.After(timeout)
	var grace <-chan time.Time
	var runErr error
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			fmt.Fprintf(logf, "[%6.1fs] %s\n", time.Since(start).Seconds(), l)
			if echo != nil {
				fmt.Fprintf(echo, "[%s] %s\n", r.Label, l)
			}
			r.parseLine(l)
			if r.Done && grace == nil {
				grace = time.After(10 * time.Second) // the power-off should follow
			}
		case <-grace:
			cmd.Process.Kill()
			grace = nil
		case <-kill:
			cmd.Process.Kill()
			runErr = fmt.Errorf("timed out after %v", timeout)
		case <-ctx.Done():
			cmd.Process.Kill()
			runErr = ctx.Err()
		}
	}
	err = <-waited
	var ee *exec.ExitError
	if runErr == nil && err != nil && !r.Done && !errors.As(err, &ee) {
		runErr = err
	}
	r.finish(runErr)
}

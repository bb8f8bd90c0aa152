package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// initSystem does what an init does before the checks can run: the kernel
// hands PID 1 an initramfs with nothing mounted and lo down.
func initSystem() error {
	var errs []error
	for _, m := range []struct{ fstype, target string }{
		{"devtmpfs", "/dev"},
		{"proc", "/proc"},
		{"sysfs", "/sys"},
		{"tmpfs", "/tmp"},
		{"tracefs", "/sys/kernel/tracing"},
		{"bpf", "/sys/fs/bpf"},
		{"cgroup2", "/sys/fs/cgroup"},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err))
		}
	}
	if err := linkUp("lo"); err != nil {
		errs = append(errs, err)
	}
	os.Setenv("PATH", "/bin")
	os.Setenv("HOME", "/")
	return errors.Join(errs...)
}

// The environment /init passes to itself across the re-exec.
const (
	stageEnv   = "TT_KMATRIX_STAGE"
	initErrEnv = "TT_KMATRIX_INIT_ERR"
)

// reexec starts this program again, as PID 1 still, now that /proc is
// mounted. It must: cilium/ebpf's rlimit package runs a BPF syscall in its
// package initializer, which looks for BPF tokens in /proc/self/mountinfo
// and caches the failure for the life of the process, so a process started
// before /proc was mounted can never load a program.
func reexec(initErr error) {
	env := append(os.Environ(), stageEnv+"=2")
	if initErr != nil {
		env = append(env, initErrEnv+"="+initErr.Error())
	}
	err := unix.Exec("/proc/self/exe", os.Args, env)
	fmt.Printf("\nKMATRIX check=init result=fail detail=%q\n\nKMATRIX-DONE exit=1\n", "re-exec: "+err.Error())
	powerOff()
}

// linkUp sets IFF_UP on an interface; for lo the kernel then adds
// 127.0.0.1/8 and ::1 by itself.
func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring %s up: get flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring %s up: set flags: %w", name, err)
	}
	return nil
}

// powerOff ends the guest; PID 1 must never exit (the kernel would panic).
func powerOff() {
	unix.Sync()
	// Let the console drain before the machine goes away.
	time.Sleep(200 * time.Millisecond)
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}

// kernelRelease returns uname -r.
func kernelRelease() string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(uts.Release[:])
}

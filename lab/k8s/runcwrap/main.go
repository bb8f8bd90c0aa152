// Command runcwrap stands between containerd and runc in the end-to-end
// test's cluster (lab/k8s). runc cannot grant a capability its caller's
// bounding set lacks ("unable to apply caps"); root on the CI machines
// lacks CAP_SYS_RESOURCE, which deploy/daemonset.yaml adds (for kernels
// before 5.11). Before "runc create" and "runc run" it removes from the
// bundle's config.json the capabilities outside its own bounding set and
// logs each one to stderr and to runcwrap.log next to its own binary; then
// it runs the real runc with the same arguments. A real node has those
// capabilities and needs no wrapper. Every other command passes through.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runc is the real runc (Debian's).
const runc = "/usr/sbin/runc"

// capNames are the kernel's capability numbers, as OCI spells them.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

func main() {
	args := os.Args[1:]
	if cmd, bundle := command(args); (cmd == "create" || cmd == "run") && bundle != "" {
		msg, err := filterCaps(filepath.Join(bundle, "config.json"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
			os.Exit(1)
		}
		if msg != "" {
			logLine(msg)
		}
	}
	err := syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// command finds runc's subcommand and the --bundle (or -b) directory,
// which defaults to the working directory.
func command(args []string) (cmd, bundle string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		case a == "--bundle" || a == "-b":
			if i+1 < len(args) {
				bundle = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case cmd == "" && (a == "--root" || a == "--log" || a == "--log-format" || a == "--criu"):
			i++ // a global flag's value
		}
	}
	if cmd != "" && bundle == "" {
		bundle, _ = os.Getwd()
	}
	return cmd, bundle
}

// bounding reads this process's capability bounding set.
func bounding() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapBnd in /proc/self/status")
}

// filterCaps rewrites the bundle's config.json without the capabilities
// outside this process's bounding set; it returns what it dropped, as a
// log line, or "".
func filterCaps(path string) (string, error) {
	bnd, err := bounding()
	if err != nil {
		return "", err
	}
	have := func(c string) bool {
		i := slices.Index(capNames, c)
		return i >= 0 && bnd&(1<<i) != 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	proc, _ := spec["process"].(map[string]any)
	caps, _ := proc["capabilities"].(map[string]any)
	dropped := map[string]bool{}
	for set, v := range caps {
		list, _ := v.([]any)
		kept := []any{}
		for _, c := range list {
			if s, _ := c.(string); have(s) {
				kept = append(kept, c)
			} else {
				dropped[fmt.Sprint(c)] = true
			}
		}
		caps[set] = kept
	}
	if len(dropped) == 0 {
		return "", nil
	}
	names := make([]string, 0, len(dropped))
	for c := range dropped {
		names = append(names, c)
	}
	slices.Sort(names)
	out, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s runcwrap: %s: dropped %s (not in this node's bounding set %016x)\n",
		time.Now().UTC().Format(time.RFC3339), filepath.Dir(path), strings.Join(names, ","), bnd), nil
}

// logLine writes to stderr and to runcwrap.log next to this binary.
func logLine(msg string) {
	fmt.Fprint(os.Stderr, msg)
	if exe, err := os.Executable(); err == nil {
		if f, err := os.OpenFile(filepath.Join(filepath.Dir(exe), "runcwrap.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.WriteString(msg)
			f.Close()
		}
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// guestProgs are the programs every guest runs: the checks (its /init) and
// the test programs they start, each static (CGO_ENABLED=0).
var guestProgs = []struct{ name, pkg string }{
	{"guest", "./lab/kmatrix/guest"},
	{"deadlines", "./lab/testprog/deadlines"},
	{"tcpsink", "./lab/testprog/tcpsink"},
	{"tcpclient", "./lab/testprog/tcpclient"},
}

// moduleRoot is the directory of the go.mod the driver runs in.
func moduleRoot() (string, error) {
	out, err := command("go", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the module (go env GOMOD is %q)", mod)
	}
	return filepath.Dir(mod), nil
}

// buildGuest cross-builds the guest programs for arch into dir.
func buildGuest(root, arch, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range guestProgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, p.name), p.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s for %s: %w\n%s", p.pkg, arch, err, out)
		}
	}
	return nil
}

// guestFiles are the initramfs contents for one kernel: the guest as /init,
// the test programs in /bin, and the kernel's config where a real system
// has it (the collector reads CONFIG_HZ there).
func guestFiles(bin string, k kernel) []initramfsFile {
	files := []initramfsFile{{Src: filepath.Join(bin, "guest"), Dst: "init", Perm: 0o755}}
	for _, p := range guestProgs[1:] {
		files = append(files, initramfsFile{Src: filepath.Join(bin, p.name), Dst: "bin/" + p.name, Perm: 0o755})
	}
	return append(files, initramfsFile{Src: k.Config, Dst: "boot/config-" + k.Release, Perm: 0o644})
}

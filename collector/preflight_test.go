package collector

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The capability helpers read and spell what /proc/PID/status says.
func TestCaps(t *testing.T) {
	if got := Caps(1<<CapSysAdmin | 1<<CapBPF | 1<<45).Names(); !slices.Equal(got, []string{"CAP_SYS_ADMIN", "CAP_BPF", "capability 45"}) {
		t.Errorf("Names = %q", got)
	}
	for _, tc := range []struct {
		caps Caps
		want string
	}{
		{0, "CAP_BPF and CAP_PERFMON"},
		{1 << CapBPF, "CAP_PERFMON"},
		{1 << CapPerfmon, "CAP_BPF"},
		{1<<CapBPF | 1<<CapPerfmon, ""},
		{1 << CapSysAdmin, ""},
	} {
		if got := tc.caps.MissingToLoad(); got != tc.want {
			t.Errorf("%q.MissingToLoad() = %q, want %q", tc.caps.Names(), got, tc.want)
		}
	}
	eff, err := EffectiveCaps()
	if err != nil {
		t.Fatal(err)
	}
	if self, err := ProcessCaps(os.Getpid(), "CapEff"); err != nil || self != eff {
		t.Errorf("ProcessCaps(self, CapEff) = %x, %v; EffectiveCaps %x", self, err, eff)
	}
	uids, err := StatusField(os.Getpid(), "Uid")
	if f := strings.Fields(uids); err != nil || len(f) != 4 || f[1] != fmt.Sprint(os.Geteuid()) {
		t.Errorf("StatusField(self, Uid) = %q, %v", uids, err)
	}
	if _, err := StatusField(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("StatusField found NoSuchField")
	}
}

// A refusal tells to grant CAP_BPF and CAP_PERFMON only when they are
// missing; held, it names what else refuses.
func TestPermissionHint(t *testing.T) {
	eperm := fmt.Errorf("load program: %w", syscall.EPERM)
	tracefs := &fs.PathError{Op: "open", Path: "/sys/kernel/tracing/events/x/id", Err: syscall.EACCES}
	for _, tc := range []struct {
		name    string
		err     error
		caps    Caps
		want    string
		notWant string
	}{
		{"none", eperm, 0, "grant CAP_BPF and CAP_PERFMON", ""},
		{"CAP_BPF only", eperm, 1 << CapBPF, "grant CAP_PERFMON", "CAP_BPF"},
		{"both held", eperm, 1<<CapBPF | 1<<CapPerfmon, "refused although CAP_BPF and CAP_PERFMON are held", "grant"},
		{"CAP_SYS_ADMIN", eperm, 1 << CapSysAdmin, "refused although CAP_SYS_ADMIN is held", "grant CAP_BPF"},
		{"tracefs", fmt.Errorf("creating probe entry on tracefs: %w", tracefs), 1<<CapBPF | 1<<CapPerfmon, "tracefs", "grant CAP_BPF"},
		{"tracefs without capabilities", tracefs, 0, "grant CAP_BPF and CAP_PERFMON", ""},
	} {
		got := permissionHint(tc.err, tc.caps)
		if !strings.Contains(got, tc.want) || (tc.notWant != "" && strings.Contains(got, tc.notWant)) {
			t.Errorf("%s: %q; want %q, not %q", tc.name, got, tc.want, tc.notWant)
		}
	}
	if err := Explain(eperm); !strings.Contains(err.Error(), "operation not permitted (") {
		t.Errorf("Explain(EPERM) = %v", err)
	}
}

package netlab

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

func TestSlotIsExclusive(t *testing.T) {
	slot, held, err := claimSlot(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holdSlot(slot); err == nil {
		t.Fatalf("slot %d was held twice", slot)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("hold a taken slot: got %v, want EADDRINUSE", err)
	}
	next, held2, err := claimSlot(slot)
	if err != nil {
		t.Fatal(err)
	}
	defer held2.Close()
	if next == slot {
		t.Fatalf("claimSlot handed out slot %d while it was held", slot)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := holdSlot(slot)
	if err != nil {
		t.Fatalf("hold slot %d after release: %v", slot, err)
	}
	again.Close()
}

func TestSlotAddrsAreDistinct(t *testing.T) {
	v4 := netip.MustParsePrefix("10.213.0.0/16")
	v6 := netip.MustParsePrefix("fd00:213::/48")
	seen := make(map[netip.Addr]int)
	for slot := range slotCount {
		c4, s4, c6, s6 := slotAddrs(slot)
		if netip.PrefixFrom(c4, 30).Masked() != netip.PrefixFrom(s4, 30).Masked() {
			t.Fatalf("slot %d: %v and %v are not in one /30", slot, c4, s4)
		}
		if netip.PrefixFrom(c6, 64).Masked() != netip.PrefixFrom(s6, 64).Masked() {
			t.Fatalf("slot %d: %v and %v are not in one /64", slot, c6, s6)
		}
		for _, a := range []netip.Addr{c4, s4, c6, s6} {
			if !v4.Contains(a) && !v6.Contains(a) {
				t.Fatalf("slot %d: %v is outside %v and %v", slot, a, v4, v6)
			}
			if other, dup := seen[a]; dup {
				t.Fatalf("slots %d and %d share %v", other, slot, a)
			}
			seen[a] = slot
		}
		// Neither the network nor the broadcast address of the /30.
		if last := c4.As4()[3] & 3; last != 1 {
			t.Fatalf("slot %d: client %v is not the first host of its /30", slot, c4)
		}
	}
	c4, s4, c6, s6 := slotAddrs(0x3fff)
	want := []string{"10.213.255.253", "10.213.255.254", "fd00:213:0:3fff::1", "fd00:213:0:3fff::2"}
	for i, a := range []netip.Addr{c4, s4, c6, s6} {
		if a.String() != want[i] {
			t.Errorf("slot 0x3fff address %d: got %v, want %s", i, a, want[i])
		}
	}
}

func TestRequireLiteral(t *testing.T) {
	for addr, ok := range map[string]bool{
		"10.213.0.2:80":      true,
		"[fd00:213::2]:80":   true,
		":0":                 true,
		"[::]:0":             true,
		"localhost:80":       false,
		"server.example:443": false,
		"10.213.0.2":         false,
	} {
		if err := requireLiteral(addr); (err == nil) != ok {
			t.Errorf("requireLiteral(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

func TestSysctlStaysInsideThePair(t *testing.T) {
	// No namespace is entered: both calls must be refused before that.
	p := &Pair{ClientNS: "ttc", ServerNS: "tts"}
	if err := p.Sysctl("other", "net.ipv4.tcp_syn_retries", "1"); err == nil {
		t.Error("Sysctl accepted a namespace that is not the pair's")
	}
	if err := p.Sysctl(p.ClientNS, "kernel.pid_max", "40000"); err == nil {
		t.Error("Sysctl accepted a global key")
	}
}

func TestPairOwner(t *testing.T) {
	for name, want := range map[string]int{
		pairBase(4194304, 1679615) + "c": 4194304,
		pairBase(12, 1) + "s":            12,
		"tt12-1x":                        0,
		"tt12-c":                         0,
		"tt-cli":                         0,
		"tt012-1c":                       0,
		"ttx-1c":                         0,
		"tt12-A_c":                       0,
		"other":                          0,
	} {
		got, ok := pairOwner(name)
		if ok != (want != 0) || got != want {
			t.Errorf("pairOwner(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	if name := pairBase(4194304, 1679615) + "c"; len(name) > maxIfName {
		t.Errorf("%q is longer than an interface name may be", name)
	}
}

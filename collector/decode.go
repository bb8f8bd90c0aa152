package collector

import (
	"bytes"
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/event"
)

const afInet6 = 10

// tcpEventSize is the size of struct tt_tcp_event as the kernel writes it.
var tcpEventSize = int(unsafe.Sizeof(tcpTtTcpEvent{}))

// clock turns the kernel's CLOCK_MONOTONIC timestamps into wall time and
// jiffies into durations.
type clock struct {
	wallMinusMono time.Duration // wall - monotonic, measured once at start
	hz            uint32
}

func (c clock) wall(mono uint64) time.Time {
	return time.Unix(0, int64(mono)).Add(c.wallMinusMono)
}

func (c clock) jiffies(j uint32) time.Duration {
	if c.hz == 0 {
		return 0
	}
	return time.Duration(uint64(j) * uint64(time.Second) / uint64(c.hz))
}

// decodeTCP decodes one ring buffer sample. It checks the length first and
// never trusts the kind: an unknown kind is an error, not a guess.
func decodeTCP(raw []byte, clk clock, out *event.TCP) error {
	if len(raw) < tcpEventSize {
		return fmt.Errorf("decode tcp event: %d bytes, want %d", len(raw), tcpEventSize)
	}
	// The sample is the C struct in host layout (bpf2go generated the Go
	// type with structs.HostLayout): copy it out without reflection.
	var r tcpTtTcpEvent
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r)), tcpEventSize), raw)
	kind := event.TCPKind(r.Kind)
	if !kind.Valid() {
		return fmt.Errorf("decode tcp event: unknown kind %d", r.Kind)
	}
	local, peer, err := addrPorts(&r)
	if err != nil {
		return err
	}
	*out = event.TCP{
		Time:         clk.wall(r.TsNs),
		Mono:         r.TsNs,
		Kind:         kind,
		PID:          r.Pid,
		Comm:         cString(r.Comm[:]),
		CgroupID:     r.CgroupId,
		NetNS:        r.Netns,
		Cookie:       r.Cookie,
		Local:        local,
		Peer:         peer,
		State:        event.TCPState(r.State),
		OldState:     event.TCPState(r.OldState),
		CAState:      event.CAState(r.CaState),
		SRTT:         time.Duration(r.SrttUs) * time.Microsecond,
		RTTVar:       time.Duration(r.RttvarUs) * time.Microsecond,
		RTO:          clk.jiffies(r.RtoJiffies),
		Backoff:      r.Backoff,
		Retransmits:  r.Retransmits,
		Errno:        errno(r.Err),
		Cwnd:         r.SndCwnd,
		RetransOut:   r.RetransOut,
		LostOut:      r.LostOut,
		TotalRetrans: r.TotalRetrans,
		SndWnd:       r.SndWnd,
		Suppressed:   r.Suppressed,
		Goid:         r.Goid,
		Sent:         r.Dir == 1,
	}
	return nil
}

// errno makes the kernel's error positive: tracepoints pass -ERRNO for
// retransmit errors and ERRNO for sk_err.
func errno(v int32) syscall.Errno {
	if v < 0 {
		v = -v
	}
	return syscall.Errno(v)
}

func addrPorts(r *tcpTtTcpEvent) (local, peer netip.AddrPort, err error) {
	var s, d netip.Addr
	switch r.Family {
	case afInet6:
		s = netip.AddrFrom16(r.Saddr).Unmap()
		d = netip.AddrFrom16(r.Daddr).Unmap()
	case 2:
		s = netip.AddrFrom4([4]byte(r.Saddr[:4]))
		d = netip.AddrFrom4([4]byte(r.Daddr[:4]))
	default:
		return local, peer, fmt.Errorf("decode tcp event: unknown address family %d", r.Family)
	}
	return netip.AddrPortFrom(s, r.Sport), netip.AddrPortFrom(d, r.Dport), nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

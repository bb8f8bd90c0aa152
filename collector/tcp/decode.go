package tcp

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/event"
)

const afInet6 = 10

// tcpEventSize is the size of struct tt_tcp_event as the kernel writes it.
var tcpEventSize = int(unsafe.Sizeof(tcpTtTcpEvent{}))

// Decode decodes one ring buffer sample of struct tt_tcp_event (the
// enrichment writes them too). It checks the length first and
// never trusts the kind: an unknown kind is an error, not a guess.
func Decode(raw []byte, clk collector.Clock, out *event.TCP) error {
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
		Time:         clk.Wall(r.TsNs),
		Mono:         r.TsNs,
		Kind:         kind,
		PID:          r.Pid,
		Comm:         collector.CString(r.Comm[:]),
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
		RTO:          clk.Jiffies(r.RtoJiffies),
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

package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// slotCount is the number of /30 subnets in 10.213.0.0/16, and so the number of Pairs that
// can exist at once on one machine.
const slotCount = 1 << 14

// slotName is the abstract unix socket name that holds a slot. Abstract names live in the
// kernel, not on disk: the name is released when the process exits, however it exits, so
// a crashed test never leaves a slot taken.
func slotName(slot int) string {
	return fmt.Sprintf("@timeout-tracer/netlab/slot/%d", slot)
}

// claimSlot reserves a subnet slot for the calling process, trying slots from start on.
// Deriving subnets from the pid and a counter alone could make two concurrent test
// processes pick the same subnet; binding a name that only one socket can hold makes the
// choice unique across all processes that share the host's network namespace. The caller
// must close the returned socket to release the slot.
func claimSlot(start int) (int, *net.UnixConn, error) {
	for i := range slotCount {
		slot := (start + i) % slotCount
		c, err := holdSlot(slot)
		if err == nil {
			return slot, c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, nil, err
		}
	}
	return 0, nil, fmt.Errorf("claim subnet slot: all %d slots are in use", slotCount)
}

// holdSlot binds the slot's name; it fails with EADDRINUSE when another socket holds it.
func holdSlot(slot int) (*net.UnixConn, error) {
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: slotName(slot), Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("hold subnet slot %d: %w", slot, err)
	}
	return c, nil
}

// slotAddrs returns the client and server addresses of a slot: the two hosts of the
// slot's /30 in 10.213.0.0/16, and ::1 and ::2 of fd00:213:0:SLOT::/64.
func slotAddrs(slot int) (client4, server4, client6, server6 netip.Addr) {
	base := slot * 4
	client4 = netip.AddrFrom4([4]byte{10, 213, byte(base >> 8), byte(base + 1)})
	server4 = netip.AddrFrom4([4]byte{10, 213, byte(base >> 8), byte(base + 2)})
	v6 := [16]byte{0xfd, 0x00, 0x02, 0x13, 0, 0, byte(slot >> 8), byte(slot), 15: 1}
	client6 = netip.AddrFrom16(v6)
	v6[15] = 2
	server6 = netip.AddrFrom16(v6)
	return client4, server4, client6, server6
}

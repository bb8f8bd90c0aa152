package tcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/timeout-tracer/tracer/tick"
)

// RegisterGoProcess lets activity events of pid name the goroutine doing
// the I/O: goidOffset is runtime.g.goid's offset in that process's binary.
func (c *Collector) RegisterGoProcess(pid uint32, goidOffset uint32) error {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed {
		return errClosed
	}
	if err := c.maps.GoPids.Put(pid, tcpTtGoPid{GoidOff: goidOffset}); err != nil {
		return fmt.Errorf("register Go process %d: %w", pid, err)
	}
	if c.goPids == nil {
		c.goPids = make(map[uint32]bool)
	}
	was := c.goPids[pid]
	c.goPids[pid] = true
	if err := c.storeGoCount(); err != nil {
		// Undone, so that the receive hook's state and go_pids agree
		// (a later registration tries again).
		if !was {
			delete(c.goPids, pid)
			c.maps.GoPids.Delete(pid)
			c.storeGoCount()
		}
		return err
	}
	return nil
}

var errClosed = errors.New("the TCP collector is closed")

// UnregisterGoProcess forgets pid (its detail tier is off, or it exited).
func (c *Collector) UnregisterGoProcess(pid uint32) error {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed {
		return nil // nothing attached any more
	}
	if err := c.maps.GoPids.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister Go process %d: %w", pid, err)
	}
	delete(c.goPids, pid)
	return c.storeGoCount()
}

// epochs advances the activity epoch every interval (on the tracer's
// common timer instants): the kernel samples each socket's goroutines once
// per epoch and direction, without reading the clock on every send.
func (c *Collector) epochs(interval time.Duration) {
	defer c.wg.Done()
	t := tick.NewTicker(interval)
	defer t.Stop()
	for epoch := uint64(2); ; epoch++ {
		select {
		case <-c.done:
			return
		case <-t.C:
			t.Next()
		}
		if err := c.maps.ActEpoch.Put(uint32(0), epoch); err != nil {
			c.log.Warn("activity epoch not advanced: each socket's activity is sampled once until it is", "err", err)
		}
	}
}

// storeGoCount tells the hot path whether go_pids is worth a lookup, and
// attaches the on-demand receive hook while go_pids is not empty (detaches
// it when it is). Called with goMu held.
func (c *Collector) storeGoCount() error {
	if err := c.maps.GoPidsN.Put(uint32(0), uint32(len(c.goPids))); err != nil {
		return fmt.Errorf("count Go processes: %w", err)
	}
	if c.recvAt < 0 {
		return nil
	}
	want := len(c.goPids) > 0
	l := c.links[c.recvAt]
	switch {
	case want && l == nil:
		l, err := attach(c.progs[c.recvAt], c.tps[c.recvAt], c.recvTyped)
		if err != nil {
			return fmt.Errorf("attach the receive hook for goroutine binding: %w", err)
		}
		c.links[c.recvAt] = l
	case !want && l != nil:
		c.links[c.recvAt] = nil
		if err := l.Close(); err != nil {
			return fmt.Errorf("detach the receive hook: %w", err)
		}
	}
	return nil
}

// receiveOnDemand detaches sock_recv_length when sock_send_length records
// owners (see Config.ReceiveAlways); storeGoCount attaches it again while
// a process's goroutines are bound. Where the send hook is missing (before
// 6.3) the receive hook (or tcp_rcv_space_adjust) is the only one that
// sees accepted sockets' owners: it stays.
func (c *Collector) receiveOnDemand() error {
	send, recv := false, -1
	for _, h := range c.hooks {
		if h.Tracepoint == "sock_send_length" && h.Type != "" {
			send = true
		}
	}
	for i, tp := range c.tps {
		if tp == "sock_recv_length" {
			recv = i
		}
	}
	if !send || recv < 0 {
		return nil
	}
	for i := range c.hooks {
		if c.hooks[i].Tracepoint == "sock_recv_length" {
			c.recvTyped = c.hooks[i].Type == "tp_btf"
			c.hooks[i].OnDemand = "while goroutine binding is on (a process's detail tier); owners are recorded on send"
		}
	}
	c.goMu.Lock()
	defer c.goMu.Unlock()
	c.recvAt = recv
	l := c.links[recv]
	c.links[recv] = nil
	if err := l.Close(); err != nil {
		return fmt.Errorf("detach the receive hook: %w", err)
	}
	return nil
}

package netlab

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Faults act on the server side of the link, in the INPUT chain of the server namespace,
// for IPv4 and IPv6 alike: what the client sends to the port is lost or answered with a
// reset, as if a middlebox or the server host misbehaved. Several faults may be in place
// at once; they apply in the order they were added. Each returns an error that includes
// the failing command and its output.

// Blackhole drops every TCP segment sent to the server's port. Put it in after the
// handshake to make the client's data go unacknowledged: tail loss probes, then
// retransmission timeouts with exponential backoff.
func (p *Pair) Blackhole(port int) error {
	return p.addRule("blackhole", port, "-j", "DROP")
}

// Loss drops each TCP segment sent to the server's port with the given probability, in
// (0, 1]. Mild loss (a few percent) on a bulk transfer makes fast retransmits; heavy loss
// makes timeouts.
func (p *Pair) Loss(port int, probability float64) error {
	if !(probability > 0 && probability <= 1) || math.IsNaN(probability) {
		return fmt.Errorf("add loss rule for port %d: probability %v is not in (0, 1]", port, probability)
	}
	return p.addRule("loss", port, "-m", "statistic", "--mode", "random",
		"--probability", strconv.FormatFloat(probability, 'f', -1, 64), "-j", "DROP")
}

// DropSYN drops connection requests (SYN without ACK) to the server's port, leaving
// established connections alone: the client retries its SYN and finally fails with
// ETIMEDOUT.
//
// The client's net.ipv4.tcp_syn_retries (or TCP_SYNCNT) n sets a time budget of
// 2^(n+1)-1 seconds rather than a count, while tcp_syn_linear_timeouts (4 by default)
// spaces the first retries 1 s apart. Measured here: n=1 sends 3 SYNs and fails after
// 3.0 s, n=2 sends 6 SYNs and fails after 7.2 s.
func (p *Pair) DropSYN(port int) error {
	return p.addRule("SYN drop", port, "--syn", "-j", "DROP")
}

// RejectReset answers every TCP segment sent to the server's port with a reset: an
// established connection fails with ECONNRESET and a new one with ECONNREFUSED.
func (p *Pair) RejectReset(port int) error {
	return p.addRule("reset", port, "-j", "REJECT", "--reject-with", "tcp-reset")
}

// addRule appends a rule matching TCP to port, followed by rest, for both IP versions.
func (p *Pair) addRule(what string, port int, rest ...string) error {
	if port < 1 || port > math.MaxUint16 {
		return fmt.Errorf("add %s rule: port %d out of range", what, port)
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		args := append([]string{"netns", "exec", p.ServerNS, bin, "-w",
			"-A", "INPUT", "-p", "tcp", "--dport", strconv.Itoa(port)}, rest...)
		if err := run("ip", args...); err != nil {
			return fmt.Errorf("add %s rule for port %d: %w", what, port, err)
		}
	}
	return nil
}

// Shape puts a token bucket filter on the server's veth, so that traffic from the server
// to the client is limited to rate and queued for up to latency before tbf drops it:
// delay without random loss. The arguments are tc's, e.g. Shape("1mbit", "4k", "400ms").
// A second call replaces the first.
func (p *Pair) Shape(rate, burst, latency string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := run("tc", "-n", p.ServerNS, "qdisc", "replace", "dev", p.ServerDev, "root",
		"tbf", "rate", rate, "burst", burst, "latency", latency); err != nil {
		return fmt.Errorf("shape %s: %w", p.ServerDev, err)
	}
	p.shaped = true
	return nil
}

// ClearFaults removes every fault: it flushes the INPUT chains of the server namespace and
// removes the shaping qdisc. Connections that survived a fault carry on.
func (p *Pair) ClearFaults() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if err := run("ip", "netns", "exec", p.ServerNS, bin, "-w", "-F", "INPUT"); err != nil {
			errs = append(errs, fmt.Errorf("flush %s INPUT: %w", bin, err))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Tracked rather than probed, because deleting a root qdisc that is not there is an
	// error.
	if p.shaped {
		if err := run("tc", "-n", p.ServerNS, "qdisc", "del", "dev", p.ServerDev, "root"); err != nil {
			errs = append(errs, fmt.Errorf("remove shaping on %s: %w", p.ServerDev, err))
		} else {
			p.shaped = false
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clear faults in %s: %w", p.ServerNS, err)
	}
	return nil
}

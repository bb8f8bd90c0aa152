// Package netlab builds a two-host network lab for root integration tests: a client and
// a server network namespace joined by a veth pair, with IPv4 and IPv6 addresses, and
// real faults (iptables drops and resets, tbf shaping) on the server side.
//
// It exists so that kernel TCP tests (retransmission timeouts, fast retransmit, SYN
// retries, resets, refused connections) can make the kernel do the real thing instead of
// faking events. Every Pair removes its namespaces, and with them its veth pair, rules and
// qdiscs, in t.Cleanup, also when the test fails.
//
// The package must not touch the host's own network: it never adds addresses, routes,
// rules or qdiscs outside the namespaces it created, and it uses only 10.213.0.0/16 and
// fd00:213::/48 inside them. It shells out to ip, iptables, ip6tables and tc rather than
// speaking netlink, so that a failing step shows the same command and message a person
// would see at a shell.
package netlab

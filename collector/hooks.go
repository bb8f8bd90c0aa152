package collector

// hook is one kernel tracepoint the TCP collector attaches to. Each has a
// tp_btf program and a raw_tp twin built from the same C body.
type hook struct {
	tracepoint string
	btfProg    string
	rawProg    string
	required   bool   // without it the collector cannot do its job
	purpose    string // shown by `tracer check`
	// fallbackFor names a hook this one stands in for when that one is missing.
	fallbackFor string
}

var tcpHooks = []hook{
	{"tcp_retransmit_skb", tcpProgBtfRetransmitSkb, tcpProgRawRetransmitSkb, true, "retransmits: rto, fast retransmit, tlp, syn retry", ""},
	{"inet_sock_set_state", tcpProgBtfInetSockSetState, tcpProgRawInetSockSetState, true, "connect, failed connect, owner at connect/listen", ""},
	{"tcp_receive_reset", tcpProgBtfTcpReceiveReset, tcpProgRawTcpReceiveReset, true, "resets received", ""},
	{"tcp_destroy_sock", tcpProgBtfTcpDestroySock, tcpProgRawTcpDestroySock, true, "forget closed sockets", ""},
	{"inet_sk_error_report", tcpProgBtfInetSkErrorReport, tcpProgRawInetSkErrorReport, false, "socket errors (ETIMEDOUT, ECONNRESET)", ""},
	{"tcp_send_reset", tcpProgBtfTcpSendReset, tcpProgRawTcpSendReset, false, "resets sent", ""},
	{"tcp_retransmit_synack", tcpProgBtfTcpRetransmitSynack, tcpProgRawTcpRetransmitSynack, false, "server-side SYN-ACK retries", ""},
	{"sock_send_length", tcpProgBtfSockSendLength, tcpProgRawSockSendLength, false, "owner of sockets on send (6.3+)", ""},
	{"sock_recv_length", tcpProgBtfSockRecvLength, tcpProgRawSockRecvLength, false, "owner of sockets on receive (6.3+)", ""},
	{"tcp_rcv_space_adjust", tcpProgBtfTcpRcvSpaceAdjust, tcpProgRawTcpRcvSpaceAdjust, false, "owner on receive where sock_recv_length is missing", "sock_recv_length"},
	{"timer_expire_entry", tcpProgBtfTimerExpireEntry, tcpProgRawTimerExpireEntry, false, "zero-window probe timer", ""},
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/timeout-tracer/tracer/collector/tcp"
	"github.com/timeout-tracer/tracer/export"
	"github.com/timeout-tracer/tracer/workload"
)

type tcpFlags struct {
	pid       int
	peer      string
	duration  time.Duration
	output    string
	lifecycle bool
	activity  time.Duration
}

func newTCPCommand(g *globalFlags) *cobra.Command {
	f := &tcpFlags{}
	cmd := &cobra.Command{
		Use:   "tcp",
		Short: "Stream kernel TCP events (retransmits, RTOs, resets, failed connects) live",
		Long: `Stream the kernel TCP events that make requests time out, each attributed to the
process that owns the socket, until interrupted or --duration ends.

Kinds: rto, fast_retransmit, tlp, syn_retransmit, retransmit, reset_received,
reset_sent, connect_failed, connect_aborted, socket_error, zero_window,
synack_retransmit; with --lifecycle also connect, established, close.

pid 0 means the owner is not known yet: a socket opened before the tracer
started is attributed on its next send or receive.`,
		Example: `  sudo tracer tcp
  sudo tracer tcp --pid 4242 -o json
  sudo tracer tcp --peer 10.0.0.0/8 --duration 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTCP(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.pid, "pid", 0, "only sockets owned by this process")
	fl.StringVar(&f.peer, "peer", "", "only events whose peer address is in this CIDR (e.g. 10.0.0.0/8, ::1/128)")
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (default: until interrupted)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&f.lifecycle, "lifecycle", false, "also show connect, established and close")
	fl.DurationVar(&f.activity, "activity", 0, "also show send/receive activity, at most once per this interval per socket (e.g. 1s; 0: off)")
	return cmd
}

func runTCP(cmd *cobra.Command, g *globalFlags, f *tcpFlags) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	format, err := export.ParseFormat(f.output)
	if err != nil {
		return err
	}
	var peer netip.Prefix
	if f.peer != "" {
		if peer, err = parsePeer(f.peer); err != nil {
			return err
		}
	}
	ctx := cmd.Context()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	var exited <-chan struct{}
	if f.pid != 0 {
		if exited, err = workload.WatchExit(f.pid); err != nil {
			return err
		}
	}

	c, err := tcp.Start(tcp.Config{PID: uint32(f.pid), Lifecycle: f.lifecycle, ActivityInterval: f.activity, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()

	w := export.NewTCPWriter(cmd.OutOrStdout(), format)
	stderr := cmd.ErrOrStderr()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lost, missed uint64
	warnLost := func() {
		s, err := c.Stats()
		if err != nil {
			return
		}
		warnGrowth(stderr, &lost, s.Lost, "warning: %d events lost (ring buffer full; the reader fell behind)\n")
		warnGrowth(stderr, &missed, s.Missed, "warning: the kernel skipped %d hook runs (the same hook was running on that CPU): their events are lost\n")
	}
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return errors.New("event stream ended unexpectedly")
			}
			if peer.IsValid() && !peer.Contains(ev.Peer.Addr()) {
				continue
			}
			if ev.Kind.Lifecycle() && !f.lifecycle {
				continue
			}
			if err := w.Write(&ev); err != nil {
				return fmt.Errorf("write event: %w", err)
			}
		case <-tick.C:
			warnLost()
		case <-exited:
			warnLost()
			fmt.Fprintf(stderr, "process %d exited; stopping\n", f.pid)
			return nil
		case <-ctx.Done():
			warnLost()
			return nil
		}
	}
}

func parsePeer(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("invalid --peer %q: want a CIDR such as 10.0.0.0/8 or an address", s)
}

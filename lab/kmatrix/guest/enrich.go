package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/timeout-tracer/tracer/collector/enrich"
	"github.com/timeout-tracer/tracer/event"
)

// enrichChecks runs the optional enrichment both ways (fentry preferred,
// kprobe forced) against a blackholed loopback client: it must report the
// client's tail loss probe. Where the kernel allows neither, the check is
// "known" (the enrichment is optional) and the hook row says "absent".
func enrichChecks(ctx context.Context, cfg config, out *reporter) {
	for _, forceKprobe := range []bool{false, true} {
		name, mode := "enrich_tlp", "auto"
		if forceKprobe {
			name, mode = "enrich_tlp_kprobe", "kprobe"
		}
		if !out.wants(name) {
			continue
		}
		via, detail, err := checkEnrich(ctx, cfg, forceKprobe)
		if !forceKprobe {
			typ, note := via, detail
			if typ == "" {
				typ = "absent"
				if err != nil {
					note = err.Error()
				}
			}
			out.hook(mode, "enrich:tcp_send_loss_probe", typ, note)
		}
		if errors.Is(err, enrich.ErrUnavailable) {
			out.known(name, "not available (optional): "+err.Error())
			continue
		}
		out.check(name, err, detail)
	}
}

func checkEnrich(ctx context.Context, cfg config, forceKprobe bool) (via, detail string, err error) {
	e, err := enrich.Start(enrich.Config{ForceKprobe: forceKprobe, PollInterval: 20 * time.Millisecond})
	if err != nil {
		return "", "", err
	}
	defer e.Close()
	lab, err := startLossLab(cfg)
	if err != nil {
		return e.Via(), "", err
	}
	defer lab.Close()
	cl, err := lab.client()
	if err != nil {
		return e.Via(), "", err
	}
	time.Sleep(300 * time.Millisecond) // healthy sends first
	if err := lab.blackhole(); err != nil {
		return e.Via(), "", err
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-e.Events():
			if !ok {
				return e.Via(), "", errors.New("enrichment event stream ended")
			}
			if ev.Local != cl.local || ev.Peer != lab.srv {
				continue
			}
			detail = fmt.Sprintf("via %s: loss probe on %s -> %s, state %s, ca %s, srtt %v, rto %v, cookie %d",
				e.Via(), ev.Local, ev.Peer, ev.State, ev.CAState, ev.SRTT, ev.RTO, ev.Cookie)
			if ev.Kind != event.TCPTLP || ev.State.String() != "ESTABLISHED" || ev.RTO < 200*time.Millisecond {
				return e.Via(), detail, errors.New("loss probe snapshot wrong")
			}
			if (e.Via() == "fentry") != (ev.Cookie != 0) {
				return e.Via(), detail, errors.New("socket cookie: want one with fentry only")
			}
			return e.Via(), detail, nil
		case <-timeout:
			return e.Via(), "", fmt.Errorf("no loss probe seen for %s within 20s (%d packets dropped)", cl.local, lab.dropped())
		case <-ctx.Done():
			return e.Via(), "", ctx.Err()
		}
	}
}

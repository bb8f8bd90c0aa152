package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/timeout-tracer/tracer/collector"
	"github.com/timeout-tracer/tracer/collector/tcp"
)

// preflight: root and kernel BTF, what every other check needs.
func preflight() error {
	return collector.Preflight()
}

// checkAttach loads and attaches the TCP collector, tp_btf where the kernel
// allows it (or raw_tp only when forced), and reports each hook's program
// type. It passes when every required hook is attached and, when forced,
// every attached hook is raw_tp. It returns the running collector (nil if
// it did not start), for the caller to use and close.
func checkAttach(out *reporter, name string, forceRaw bool) *tcp.Collector {
	mode := "auto"
	if forceRaw {
		mode = "raw"
	}
	c, err := tcp.Start(tcp.Config{ForceRawTP: forceRaw, RateBurst: 100000, PollInterval: 20 * time.Millisecond})
	if err != nil {
		out.check(name, err, "")
		return nil
	}
	hooks := c.Hooks()

	count := map[string]int{}
	var fellBack, absent []string
	var errs []error
	for _, h := range hooks {
		typ, detail := h.Type, ""
		switch {
		case h.Skipped != "":
			typ, detail = "skipped", h.Skipped
		case h.Type == "":
			typ, detail = "absent", short(h.Err)
			absent = append(absent, h.Tracepoint)
			if h.Required {
				errs = append(errs, fmt.Errorf("required %s not attached", h.Tracepoint))
			}
		case h.Fallback != nil:
			detail = "tp_btf: " + short(h.Fallback)
			fellBack = append(fellBack, h.Tracepoint)
		case h.OnDemand != "":
			detail = "attached " + h.OnDemand
		}
		if forceRaw && h.Type == "tp_btf" {
			errs = append(errs, fmt.Errorf("%s attached as tp_btf although raw_tp was forced", h.Tracepoint))
		}
		count[typ]++
		if out.wants(name) {
			out.hook(mode, h.Tracepoint, typ, detail)
		}
	}
	detail := fmt.Sprintf("%d hooks: tp_btf=%d raw_tp=%d skipped=%d absent=%d",
		len(hooks), count["tp_btf"], count["raw_tp"], count["skipped"], count["absent"])
	if !forceRaw && len(fellBack) > 0 {
		detail += "; raw_tp fallback: " + strings.Join(fellBack, ",")
	}
	if len(absent) > 0 {
		detail += "; absent: " + strings.Join(absent, ",")
	}
	out.check(name, errors.Join(errs...), detail)
	return c
}

// short cuts an attach error to its first line and 160 bytes: the table
// only needs the reason, not the verifier log.
func short(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

package bench

import (
	"fmt"
	"strings"

	"github.com/timeout-tracer/tracer/collector/goprobe"
)

// hitCounts sums the per-probe hits of a run of the deadline probes.
type hitCounts struct {
	create, ret, header, request, span, roundTrip, grpcHeader, grpcStream, dial, newproc uint64
}

// add adds the hits between two readings of the probes' counters.
func (h *hitCounts) add(s0, s1 goprobe.Stats) {
	h.create += s1.CreateHits - s0.CreateHits
	h.ret += s1.ReturnHits - s0.ReturnHits
	h.header += s1.HeaderHits - s0.HeaderHits
	h.request += s1.RequestHits - s0.RequestHits
	h.span += s1.SpanHits - s0.SpanHits
	h.roundTrip += s1.RoundTripHits - s0.RoundTripHits
	h.grpcHeader += s1.GRPCHeaderHits - s0.GRPCHeaderHits
	h.grpcStream += s1.GRPCStreamHits - s0.GRPCStreamHits
	h.dial += s1.DialHits - s0.DialHits
	h.newproc += s1.NewprocHits - s0.NewprocHits
}

// perRequest says, probe by probe, how many hits a request cost (those
// that cost none are left out).
func (h hitCounts) perRequest(reqs uint64) string {
	if reqs == 0 {
		return ""
	}
	var parts []string
	for _, c := range []struct {
		name string
		n    uint64
	}{
		{"WithDeadlineCause entry", h.create}, {"WithDeadlineCause returns", h.ret},
		{"net/http header keys", h.header}, {"net/http requests read", h.request}, {"OTel span starts", h.span},
		{"net/http round trips", h.roundTrip}, {"gRPC HEADERS frames", h.grpcHeader}, {"gRPC streams", h.grpcStream},
		{"dials", h.dial}, {"goroutine starts (newproc1)", h.newproc},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", c.name, float64(c.n)/float64(reqs)))
		}
	}
	return strings.Join(parts, ", ")
}

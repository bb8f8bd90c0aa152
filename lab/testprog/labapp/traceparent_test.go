package main

import "testing"

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		in            string
		trace, parent string // empty: must fail
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
			"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{in: ""},
		{in: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},  // version
		{in: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},  // upper case
		{in: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},  // zero trace
		{in: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},  // zero parent
		{in: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"}, // length
		{in: "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},  // separator
		{in: "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},  // not hex
	} {
		trace, parent, err := parseTraceparent(tc.in)
		if tc.trace == "" {
			if err == nil {
				t.Errorf("parseTraceparent(%q) = %q, %q; want an error", tc.in, trace, parent)
			}
			continue
		}
		if err != nil || trace != tc.trace || parent != tc.parent {
			t.Errorf("parseTraceparent(%q) = %q, %q, %v; want %q, %q", tc.in, trace, parent, err, tc.trace, tc.parent)
		}
	}
}

func TestClientFlagCheck(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name     string
		cfg      clientConfig
		explicit map[string]bool
		ok       bool
	}{
		{"defaults", clientConfig{proto: "http", span: spanBefore, otel: true, concurrency: 1}, nil, true},
		{"bad proto", clientConfig{proto: "udp", span: spanBefore, concurrency: 1}, nil, false},
		{"bad span", clientConfig{proto: "http", span: "after", concurrency: 1}, nil, false},
		{"default transport", clientConfig{proto: "http", span: spanBefore, otel: true, concurrency: 1, transport: "default"}, nil, true},
		{"bad transport", clientConfig{proto: "http", span: spanBefore, otel: true, concurrency: 1, transport: "h3"}, nil, false},
		{"inside without otel", clientConfig{proto: "grpc", span: spanInside, concurrency: 1}, nil, false},
		{"no workers", clientConfig{proto: "http", span: spanNone}, nil, false},
		{"traceparent", clientConfig{proto: "http", span: spanBefore, otel: true, concurrency: 1, traceparent: tp}, nil, true},
		{"traceparent and span", clientConfig{proto: "http", span: spanInside, otel: true, concurrency: 1, traceparent: tp},
			map[string]bool{"span": true}, false},
		{"bad traceparent", clientConfig{proto: "http", span: spanNone, concurrency: 1, traceparent: "00-1-2-01"}, nil, false},
	} {
		cfg := tc.cfg
		err := cfg.check(tc.explicit)
		if (err == nil) != tc.ok {
			t.Errorf("%s: check = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err == nil && cfg.traceparent != "" && (cfg.span != spanNone || cfg.otel) {
			t.Errorf("%s: -traceparent left span %q otel %v", tc.name, cfg.span, cfg.otel)
		}
	}
}

package workload

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Service is what a process says of itself in its OpenTelemetry
// environment: OTEL_SERVICE_NAME (else service.name of
// OTEL_RESOURCE_ATTRIBUTES) and the other resource attributes, so that the
// timeout span's resource matches the service's own spans.
type Service struct {
	// Name is empty when the process names no service.
	Name string
	// Attributes are the other entries of OTEL_RESOURCE_ATTRIBUTES
	// (service.namespace, deployment.environment, ...), at most
	// MaxResourceAttributes; nil when none.
	Attributes map[string]string
}

// MaxResourceAttributes bounds Service.Attributes.
const MaxResourceAttributes = 32

// ReadService reads the service process pid names in its environment from
// procRoot. The environment of another user's process needs
// CAP_SYS_PTRACE, like its executable; an unreadable one gives an empty
// Service and the error.
func ReadService(procRoot string, pid int) (Service, error) {
	env, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return Service{}, procError(pid, "read environ", err)
	}
	return ParseService(env), nil
}

// ParseService parses a NUL-separated environment block.
func ParseService(env []byte) Service {
	var svc, resAttrs string
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("OTEL_SERVICE_NAME=")); ok {
			svc = string(v)
		} else if v, ok := bytes.CutPrefix(kv, []byte("OTEL_RESOURCE_ATTRIBUTES=")); ok {
			resAttrs = string(v)
		}
	}
	attrs := parseResourceAttributes(resAttrs)
	if svc == "" {
		svc = attrs["service.name"]
	}
	delete(attrs, "service.name")
	s := Service{Name: svc}
	if len(attrs) > 0 {
		s.Attributes = attrs
	}
	return s
}

// parseResourceAttributes parses OTEL_RESOURCE_ATTRIBUTES: key=value pairs
// separated by commas, values percent-encoded. Malformed entries are
// skipped; at most MaxResourceAttributes are kept.
func parseResourceAttributes(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		if len(out) >= MaxResourceAttributes {
			break
		}
		out[k] = val
	}
	return out
}

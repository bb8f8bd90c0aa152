package workload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseService(t *testing.T) {
	cases := []struct {
		env   string
		name  string
		attrs map[string]string
	}{
		{"PATH=/bin\x00OTEL_SERVICE_NAME=orders\x00", "orders", nil},
		{"OTEL_RESOURCE_ATTRIBUTES=service.name=ledger,bad,=x,deployment.environment=lab%20one\x00", "ledger",
			map[string]string{"deployment.environment": "lab one"}},
		{"OTEL_SERVICE_NAME=a\x00OTEL_RESOURCE_ATTRIBUTES=service.name=b, k = v \x00", "a", map[string]string{"k": "v"}},
		{"OTEL_RESOURCE_ATTRIBUTES=x=%zz\x00", "", nil}, // a malformed escape is skipped
		{"", "", nil},
	}
	for _, c := range cases {
		s := ParseService([]byte(c.env))
		if s.Name != c.name || fmt.Sprint(s.Attributes) != fmt.Sprint(c.attrs) {
			t.Errorf("%q: got %+v, want %q %v", c.env, s, c.name, c.attrs)
		}
	}
	var many []string
	for i := range MaxResourceAttributes + 10 {
		many = append(many, fmt.Sprintf("k%d=v", i))
	}
	if s := ParseService([]byte("OTEL_RESOURCE_ATTRIBUTES=" + strings.Join(many, ","))); len(s.Attributes) != MaxResourceAttributes {
		t.Errorf("%d attributes kept, want the cap %d", len(s.Attributes), MaxResourceAttributes)
	}
}

func TestReadServiceAndAGoneProcess(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "42"), 0o755)
	os.WriteFile(filepath.Join(root, "42", "environ"), []byte("OTEL_SERVICE_NAME=checkout\x00"), 0o644)
	if s, err := ReadService(root, 42); err != nil || s.Name != "checkout" {
		t.Errorf("got %+v %v", s, err)
	}
	if _, err := ReadService(root, 43); !errors.Is(err, ErrGone) {
		t.Errorf("a gone process: %v, want ErrGone", err)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, c := range []struct {
		args        []string
		cmd, bundle string
	}{
		{[]string{"--root", "/run/runc", "--log", "/x/log.json", "create", "--bundle", "/b", "id"}, "create", "/b"},
		{[]string{"--root=/run/runc", "run", "-b", "/b2", "id"}, "run", "/b2"},
		{[]string{"create", "--bundle=/b3", "id"}, "create", "/b3"},
		{[]string{"--root", "/r", "state", "id"}, "state", ""},
	} {
		cmd, bundle := command(c.args)
		if cmd != c.cmd || (c.bundle != "" && bundle != c.bundle) {
			t.Errorf("command(%q) = %q, %q; want %q, %q", c.args, cmd, bundle, c.cmd, c.bundle)
		}
	}
}

// TestFilterCaps: capabilities outside this process's bounding set leave
// the bundle, the others stay, other fields are kept.
func TestFilterCaps(t *testing.T) {
	bnd, err := bounding()
	if err != nil {
		t.Fatal(err)
	}
	var have, lack []string
	for i, c := range capNames {
		if bnd&(1<<i) != 0 {
			have = append(have, c)
		} else {
			lack = append(lack, c)
		}
	}
	list := append(slices.Clone(have[:min(3, len(have))]), lack...)
	spec := map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"args": []string{"x"},
		"capabilities": map[string]any{"bounding": list, "effective": list, "permitted": list}}}
	b, _ := json.Marshal(spec)
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := filterCaps(p)
	if err != nil {
		t.Fatal(err)
	}
	if (msg != "") != (len(lack) > 0) {
		t.Errorf("log line %q with %d capabilities to drop", msg, len(lack))
	}
	b, _ = os.ReadFile(p)
	var got struct {
		OCIVersion string `json:"ociVersion"`
		Process    struct {
			Args         []string            `json:"args"`
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := have[:min(3, len(have))]
	for _, set := range []string{"bounding", "effective", "permitted"} {
		if !slices.Equal(got.Process.Capabilities[set], want) {
			t.Errorf("%s = %v, want %v (bounding set %016x)", set, got.Process.Capabilities[set], want, bnd)
		}
	}
	if got.OCIVersion != "1.0.2" || !slices.Equal(got.Process.Args, []string{"x"}) {
		t.Errorf("other fields changed: %s", b)
	}
}

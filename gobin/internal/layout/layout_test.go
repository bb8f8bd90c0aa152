package layout

import (
	"bytes"
	"strings"
	"testing"
)

// sample is a module family with a layout change between v1.2.0 and
// v1.4.0 of T, and U unchanged.
func sample() *File {
	lay := func(v string, tb int64, u bool) Layout {
		l := Layout{Module: "example.com/m", Version: v, Types: map[string]map[string]int64{
			"example.com/m.T": {"a": 0, "b": tb},
		}}
		if u {
			l.Types["example.com/m.U"] = map[string]int64{"x": 8}
		}
		return l
	}
	return &File{
		Family:   "m",
		About:    "test",
		Generate: Spec{Require: []string{"example.com/m"}, Versions: []string{"v1.10.0", "v1.2.0", "v1.4.0", "v1.0.0"}, Toolchain: "go1.26.8", Arches: []string{"amd64"}},
		// Out of order: Marshal sorts by semantic version (v1.10.0 last).
		Layouts: []Layout{lay("v1.10.0", 24, true), lay("v1.2.0", 16, false), lay("v1.4.0", 24, true), lay("v1.0.0", 16, false)},
	}
}

func TestMarshalParse(t *testing.T) {
	data, err := Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic whatever the input order.
	f := sample()
	f.Layouts[0], f.Layouts[3] = f.Layouts[3], f.Layouts[0]
	again, _ := Marshal(f)
	if !bytes.Equal(data, again) {
		t.Errorf("Marshal depends on the order of Layouts:\n%s\n%s", data, again)
	}
	_, layouts, _ := strings.Cut(string(data), `"layouts"`)
	if strings.Index(layouts, `"v1.4.0"`) > strings.Index(layouts, `"v1.10.0"`) {
		t.Errorf("layouts not in semantic-version order:\n%s", data)
	}
	tab, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Family() != "m" || strings.Join(tab.Versions("example.com/m"), " ") != "v1.0.0 v1.2.0 v1.4.0 v1.10.0" {
		t.Errorf("family %q versions %v", tab.Family(), tab.Versions("example.com/m"))
	}
	if off, ok := tab.Offset(Key{Module: "example.com/m", Version: "v1.4.0"}, "example.com/m.T", "b"); !ok || off != 24 {
		t.Errorf("Offset: %d, %v", off, ok)
	}
	if _, ok := tab.Offset(Key{Module: "example.com/m", Version: "v1.4.0", Arch: "amd64"}, "example.com/m.T", "b"); ok {
		t.Error("Offset found an arch-independent layout under an arch")
	}
	if len(tab.Keys()) != 4 || tab.Keys()[3].Version != "v1.10.0" {
		t.Errorf("Keys: %v", tab.Keys())
	}
}

func TestParseRefuses(t *testing.T) {
	good, _ := Marshal(sample())
	for name, data := range map[string]string{
		"unknown field": strings.Replace(string(good), `"about"`, `"abuot"`, 1),
		"negative":      strings.Replace(string(good), `"b": 16`, `"b": -16`, 1),
		"duplicate":     strings.Replace(string(good), `"version": "v1.2.0"`, `"version": "v1.0.0"`, 1),
		"no version":    strings.Replace(string(good), `"version": "v1.2.0"`, `"version": ""`, 1),
		"no family":     strings.Replace(string(good), `"family": "m"`, `"family": ""`, 1),
		"trailing":      string(good) + "{}",
		"not json":      "family: m",
	} {
		if data == string(good) {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: Parse accepted it", name)
		}
	}
}

// TestLookup checks the bracket rule: a version between two entries takes
// the lower one's offsets only when both have the same layout of the type.
func TestLookup(t *testing.T) {
	data, _ := Marshal(sample())
	tab, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	const m, T, U = "example.com/m", "example.com/m.T", "example.com/m.U"
	for _, tc := range []struct {
		typ, path, version string
		want               int64 // -1: none
		used               string
	}{
		{T, "b", "v1.2.0", 16, "v1.2.0"}, // exact
		{T, "b", "v1.1.5", 16, "v1.0.0"}, // v1.0.0 and v1.2.0 agree
		{T, "b", "v1.3.0", -1, ""},       // v1.2.0 and v1.4.0 differ
		{T, "a", "v1.3.0", -1, ""},       // ... for every field of T
		{T, "b", "v1.6.0", 24, "v1.4.0"}, // v1.4.0 and v1.10.0 agree
		{T, "b", "v1.10.0-rc.1", 24, "v1.4.0"},
		{U, "x", "v1.1.0", -1, ""},  // U absent on both sides
		{U, "x", "v1.3.0", -1, ""},  // appeared in between
		{T, "b", "v0.9.0", -1, ""},  // below the table
		{T, "b", "v1.11.0", -1, ""}, // above
		{T, "b", "(devel)", -1, ""}, // not semantic
		{T, "b", "", -1, ""},
		{T, "nosuch", "v1.6.0", -1, ""},
	} {
		off, used, err := tab.Lookup(m, tc.version, tc.typ, tc.path)
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("%s.%s@%q: %d from %s; want none", tc.typ, tc.path, tc.version, off, used)
		case tc.want >= 0 && (err != nil || off != tc.want || used != tc.used):
			t.Errorf("%s.%s@%q: %d from %s, %v; want %d from %s", tc.typ, tc.path, tc.version, off, used, err, tc.want, tc.used)
		}
	}
	if _, _, err := tab.Lookup("example.com/other", "v1.2.0", T, "b"); err == nil {
		t.Error("Lookup of another module succeeded")
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"1.9", "1.10", "1.21", "2.0"}
	for i := range ordered {
		for j := range ordered {
			if got, want := CompareVersions(ordered[i], ordered[j]), boolCmp(i > j, i < j); got != want {
				t.Errorf("CompareVersions(%s, %s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
	if CompareVersions("v1.10.0", "v1.9.0") <= 0 {
		t.Error("v1.10.0 <= v1.9.0")
	}
}

package gobin

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/timeout-tracer/tracer/gobin/internal/layout"
)

// TestLayoutsMatchOldTables (transitional: removed with the generated Go
// tables) proves the layouts written by genlayouts hold exactly what the
// three old generated tables held: every entry of each table's switch, read
// from its source and confirmed through the table's own function, is in the
// layouts with the same offset, nothing more, and the version lists agree.
func TestLayoutsMatchOldTables(t *testing.T) {
	caseRE := regexp.MustCompile(`case (offsetKey|otelKey)\{"([^"]*)", "([^"]*)", "([^"]*)", "([^"]*)"\}:\s*return (\d+), true`)
	for _, fam := range []struct{ name, file string }{{"go", "offsets_table.go"}, {"otel", "otel_offsets_table.go"}, {"grpc", "grpc_offsets_table.go"}} {
		tab, err := layoutTable(fam.name)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(fam.file)
		if err != nil {
			t.Fatal(err)
		}
		old := 0
		for _, m := range caseRE.FindAllStringSubmatch(string(src), -1) {
			old++
			a, b, typ, path := m[2], m[3], m[4], m[5]
			want, _ := strconv.ParseInt(m[6], 10, 64)
			var viaFunc int64
			var ok bool
			var k layout.Key
			switch fam.name {
			case "go":
				viaFunc, ok = tableOffset(offsetKey{a, b, typ, path})
				k = layout.Key{Version: a, Arch: b}
			case "otel":
				viaFunc, ok = otelTableOffset(otelKey{a, b, typ, path})
				k = layout.Key{Module: a, Version: b}
			case "grpc":
				viaFunc, ok = grpcTableOffset(otelKey{a, b, typ, path})
				k = layout.Key{Module: a, Version: b}
			}
			if !ok || viaFunc != want {
				t.Fatalf("%s: source parse disagrees with the table function for %v", fam.name, m[0])
			}
			got, ok := tab.Offset(k, typ, path)
			if !ok || got != want {
				t.Errorf("%s %+v %s.%s: layouts %d (%v), old table %d", fam.name, k, typ, path, got, ok, want)
			}
		}
		now := 0
		for _, k := range tab.Keys() {
			l, _ := tab.Layout(k)
			for _, fields := range l.Types {
				now += len(fields)
			}
		}
		t.Logf("%s: %d entries in the old table, %d in the layouts, %d layouts", fam.name, old, now, len(tab.Keys()))
		if old == 0 || now != old {
			t.Errorf("%s: %d entries in the old table, %d in the layouts", fam.name, old, now)
		}
	}
	goTab, _ := layoutTable("go")
	if !slices.Equal(goTab.Toolchains(), tableToolchains()) {
		t.Errorf("toolchains %v, old %v", goTab.Toolchains(), tableToolchains())
	}
	for fam, versions := range map[string]map[string][]string{"otel": otelTableVersions(), "grpc": grpcTableVersions()} {
		tab, _ := layoutTable(fam)
		for m, vs := range versions {
			got := tab.Versions(m)
			slices.Sort(got)
			if !slices.Equal(got, vs) {
				t.Errorf("%s %s: versions %v, old %v", fam, m, got, vs)
			}
		}
	}
}

func BenchmarkOldTableOffset(b *testing.B) {
	for b.Loop() {
		if _, ok := tableOffset(offsetKey{"1.24", "arm64", "net/http.persistConn", "conn"}); !ok {
			b.Fatal("no entry")
		}
	}
}

package layout

import "testing"

func TestCompareSemver(t *testing.T) {
	ordered := []string{"v1.2.3-0.20200101000000-abcdef", "v1.2.3-alpha", "v1.2.3-alpha.1", "v1.2.3-alpha.beta", "v1.2.3-beta.2", "v1.2.3-beta.11", "v1.2.3-rc.1", "v1.2.3", "v1.2.4", "v1.10.0", "v2.0.0+incompatible"}
	for i := range ordered {
		for j := range ordered {
			want := boolCmp(i > j, i < j)
			if got := compareSemver(ordered[i], ordered[j]); got != want {
				t.Errorf("compareSemver(%s, %s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
	for _, bad := range []string{"", "1.2.3", "v1.2", "v01.2.3", "v1.2.3-", "(devel)"} {
		if _, ok := parseSemver(bad); ok {
			t.Errorf("parseSemver(%q) accepted", bad)
		}
	}
}

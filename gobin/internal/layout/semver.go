package layout

import (
	"strconv"
	"strings"
)

// semver is a parsed module version vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]
// (pseudo-versions are pre-releases).
type semver struct {
	num [3]uint64
	pre []string
}

// parseSemver parses a module version; false if it is not semantic.
func parseSemver(v string) (semver, bool) {
	v, ok := strings.CutPrefix(v, "v")
	if !ok {
		return semver{}, false
	}
	v, _, _ = strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return semver{}, false
	}
	var s semver
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || (len(p) > 1 && p[0] == '0') {
			return semver{}, false
		}
		s.num[i] = n
	}
	if hasPre {
		if pre == "" {
			return semver{}, false
		}
		s.pre = strings.Split(pre, ".")
	}
	return s, true
}

// compareSemver orders two module versions by semantic-versioning
// precedence; versions that do not parse sort first.
func compareSemver(a, b string) int {
	x, xok := parseSemver(a)
	y, yok := parseSemver(b)
	switch {
	case !xok || !yok:
		return boolCmp(xok, yok)
	}
	for i := range x.num {
		if x.num[i] != y.num[i] {
			return boolCmp(x.num[i] > y.num[i], x.num[i] < y.num[i])
		}
	}
	// A release sorts after its pre-releases.
	if len(x.pre) == 0 || len(y.pre) == 0 {
		return boolCmp(len(x.pre) == 0 && len(y.pre) > 0, len(y.pre) == 0 && len(x.pre) > 0)
	}
	for i := 0; i < len(x.pre) && i < len(y.pre); i++ {
		if c := comparePrerelease(x.pre[i], y.pre[i]); c != 0 {
			return c
		}
	}
	return boolCmp(len(x.pre) > len(y.pre), len(x.pre) < len(y.pre))
}

// comparePrerelease orders identifiers: numeric ones numerically and
// before alphanumeric ones, which compare as strings.
func comparePrerelease(a, b string) int {
	an, aerr := strconv.ParseUint(a, 10, 64)
	bn, berr := strconv.ParseUint(b, 10, 64)
	switch {
	case aerr == nil && berr == nil:
		return boolCmp(an > bn, an < bn)
	case aerr == nil:
		return -1
	case berr == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// boolCmp returns 1 if gt, -1 if lt, else 0.
func boolCmp(gt, lt bool) int {
	switch {
	case gt:
		return 1
	case lt:
		return -1
	}
	return 0
}

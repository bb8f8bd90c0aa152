package gobin

import (
	"strconv"
	"strings"
)

// goRelease parses the major and minor numbers of a Go version string as
// found in build information: "go1.26.8", "go1.22rc1", "go1.21.0 X:loopvar",
// "devel go1.27-abcdef ...".
func goRelease(v string) (major, minor int, ok bool) {
	v = strings.TrimPrefix(v, "devel ")
	v, _, _ = strings.Cut(v, " ")
	v, found := strings.CutPrefix(v, "go")
	if !found {
		return 0, 0, false
	}
	majorS, rest, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	major, err1 := strconv.Atoi(majorS)
	minor, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// releaseOf returns the "major.minor" release of a Go version string, the
// key of the offsets table.
func releaseOf(v string) (string, bool) {
	major, minor, ok := goRelease(v)
	if !ok {
		return "", false
	}
	return strconv.Itoa(major) + "." + strconv.Itoa(minor), true
}

// minRegABIMinor is the first Go 1.x release whose functions use the register
// ABI on each supported architecture.
func minRegABIMinor(arch string) int {
	if arch == "arm64" {
		return 18
	}
	return 17
}

package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Dockerfile is not built here (no container engine), so this keeps it
// honest: the same Go as go.mod, a static trimmed build, and the file
// system, paths and entrypoint that rootfs.go and image.go give the image.
func TestDockerfileMatchesImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindStringSubmatch(string(mod))
	if goVersion == nil || !strings.Contains(df, "FROM docker.io/library/golang:"+goVersion[1]+"-") {
		t.Errorf("the build stage's Go is not go.mod's (%v)", goVersion)
	}
	if !strings.Contains(df, "\nFROM scratch\n") {
		t.Error("the final stage is not FROM scratch")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", "-X main.version=${VERSION}", "-X main.commit=${COMMIT}",
		"-o /rootfs/" + binaryPath + " ./cmd/tracer", "chmod 1777 tmp", ">" + caPath, "/usr/share/ca-certificates/mozilla/*.crt",
		"\nENV " + envPath + "\n", "COPY --from=build /rootfs/ /\n"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for file, content := range map[string]string{"etc/passwd": passwd, "etc/group": group, "etc/nsswitch.conf": nsswitch} {
		if !strings.Contains(df, "printf '"+strings.ReplaceAll(content, "\n", `\n`)+"' >"+file) {
			t.Errorf("Dockerfile writes another %s than the image's %q", file, content)
		}
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT (.*)$`).FindStringSubmatch(df)
	var ep []string
	if m == nil || json.Unmarshal([]byte(m[1]), &ep) != nil || !slices.Equal(ep, []string{"/" + binaryPath}) {
		t.Errorf("ENTRYPOINT %v, want [/%s]", m, binaryPath)
	}
	if strings.Contains(df, "\nUSER ") {
		t.Error("the Dockerfile sets a USER; the image runs as root (BPF), as the DaemonSet says")
	}
}

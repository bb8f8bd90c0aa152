// Command imagebuild writes the tracer's OCI image, for amd64 and arm64, to
// one tar that `ctr images import` reads (an OCI image layout): no
// registry, no container engine, and the same bytes for the same commit.
// `make image` runs it; docs/kubernetes.md ("Image") says what is inside.
//
// It is build tooling, not part of the product: it lives under tools/ so
// that cmd/ holds only what users run.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var c config
	flag.StringVar(&c.out, "o", "bin/tracer-image.tar", "output tar (OCI image layout)")
	flag.StringVar(&c.repo, "repo", "", "checkout to build (default: the git top level of the current directory)")
	flag.StringVar(&c.ref, "ref", "", "image name (default: the image of deploy/daemonset.yaml, so that an import gives exactly what the manifest runs)")
	flag.StringVar(&c.platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated platforms")
	flag.StringVar(&c.source, "source", "https://github.com/timeout-tracer/tracer", "org.opencontainers.image.source")
	flag.StringVar(&c.caDir, "ca-dir", "/usr/share/ca-certificates/mozilla", "Debian's Mozilla CA certificates, bundled as /etc/ssl/certs/ca-certificates.crt; empty: none")
	flag.StringVar(&c.goCmd, "go", "go", "the go command")
	printRef := flag.Bool("print-ref", false, "print the image name and exit")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "imagebuild: no arguments expected")
		os.Exit(2)
	}
	if *printRef {
		ref, err := c.imageRef()
		if err != nil {
			fmt.Fprintln(os.Stderr, "imagebuild:", err)
			os.Exit(1)
		}
		fmt.Println(ref)
		return
	}
	res, err := build(c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s %s (%s)\n", c.out, res.ref, res.digest, strings.Join(res.platforms, ", "))
}

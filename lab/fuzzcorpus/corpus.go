// Package fuzzcorpus writes seed corpus files in the format `go test`
// reads from testdata/fuzz/<FuzzName>/: the fuzzers' committed corpora are
// made from real inputs (kernel records, Go binaries, recordings) by the
// capture tests of each package, run with -corpus.write.
package fuzzcorpus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Encode returns one corpus file holding the fuzz arguments, in the
// "go test fuzz v1" format. Supported: []byte, string, uint8, uint16,
// uint32, uint64.
func Encode(args ...any) ([]byte, error) {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case uint8:
			fmt.Fprintf(&b, "uint8(%d)\n", v)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		default:
			return nil, fmt.Errorf("encode fuzz corpus: unsupported argument type %T", a)
		}
	}
	return []byte(b.String()), nil
}

// Write stores one entry under dir/<fuzzName>/<label>-<hash>, the name
// saying where the input came from; the same input always gets the same
// name, so rewriting a corpus does not duplicate it.
func Write(dir, fuzzName, label string, args ...any) error {
	data, err := Encode(args...)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	d := filepath.Join(dir, fuzzName)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("write fuzz corpus: %w", err)
	}
	name := label + "-" + hex.EncodeToString(sum[:6])
	if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
		return fmt.Errorf("write fuzz corpus: %w", err)
	}
	return nil
}

//go:build ignore

// Command btfcarve extracts the raw .BTF section from a kernel image that is
// not an ELF file (an arm64 "Image", optionally gzip-compressed, as shipped in
// Debian's linux-image-*-arm64 packages as /boot/vmlinuz-*).
//
// It scans for the BTF header (magic 0xEB9F little-endian, version 1, flags 0,
// hdr_len 24) and keeps the candidate whose layout is consistent: type section
// at offset 0, string section right after it, both non-empty and inside the
// file, string section starting and ending with NUL. Exactly one candidate must
// pass. Only used by gen-vmlinux.sh; not part of the normal build.
//
// Usage: go run bpf/include/internal/btfcarve/main.go IMAGE OUT.btf
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: btfcarve IMAGE OUT.btf")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "btfcarve:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return err
		}
		zr.Multistream(false) // trailing bytes after the gzip stream are padding/signature
		if data, err = io.ReadAll(zr); err != nil {
			return err
		}
	}

	le := binary.LittleEndian
	magic := []byte{0x9f, 0xeb, 1, 0} // magic, version 1, flags 0
	var found [][]byte
	for off := 0; ; off++ {
		i := bytes.Index(data[off:], magic)
		if i < 0 {
			break
		}
		off += i
		h := data[off:]
		if len(h) < 24 || le.Uint32(h[4:]) != 24 {
			continue
		}
		typeOff, typeLen := le.Uint32(h[8:]), le.Uint32(h[12:])
		strOff, strLen := le.Uint32(h[16:]), le.Uint32(h[20:])
		size := 24 + uint64(strOff) + uint64(strLen)
		if typeOff != 0 || strOff != typeLen || typeLen < 1024 || strLen < 1024 ||
			size > uint64(len(h)) {
			continue
		}
		strs := h[24+strOff : size]
		if strs[0] != 0 || strs[len(strs)-1] != 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "btfcarve: BTF at offset %#x: %d bytes (types %d, strings %d)\n",
			off, size, typeLen, strLen)
		found = append(found, h[:size])
	}
	if len(found) != 1 {
		return fmt.Errorf("%s: want exactly one BTF blob, found %d", in, len(found))
	}
	return os.WriteFile(out, found[0], 0o644)
}

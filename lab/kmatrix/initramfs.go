package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks an initramfs
// from (Documentation/driver-api/early-userspace/buffer-format.rst).
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

// File modes of cpio entries (the st_mode type bits).
const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeChar = 0o020000
)

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor uint32, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := uint32(1)
	if mode&modeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr + name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

// pad aligns to 4 bytes, as newc wants after each name and each body.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir|0o755, 0, 0, nil) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, modeReg|perm, 0, 0, data)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, major, minor uint32) {
	c.entry(name, modeChar|0o600, major, minor, nil)
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

// initramfsFile is one file to put into the initramfs.
type initramfsFile struct {
	Src  string // on the host
	Dst  string // in the guest, without a leading slash
	Perm uint32
}

// writeInitramfs writes a gzip-compressed initramfs holding the files, the
// directories they need, the mount points /init uses and /dev/console (so
// that /init has a console before it mounts devtmpfs).
func writeInitramfs(dst string, files []initramfsFile) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return err
	}
	cw := &cpioWriter{w: zw}
	dirs := map[string]bool{}
	mkdir := func(d string) {
		var walk func(string)
		walk = func(d string) {
			if d == "." || d == "/" || dirs[d] {
				return
			}
			walk(path.Dir(d))
			dirs[d] = true
			cw.Dir(d)
		}
		walk(d)
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "bin", "boot"} {
		mkdir(d)
	}
	cw.CharDev("dev/console", 5, 1)
	for _, fl := range files {
		data, err := os.ReadFile(fl.Src)
		if err != nil {
			return err
		}
		mkdir(path.Dir(fl.Dst))
		cw.File(fl.Dst, fl.Perm, data)
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

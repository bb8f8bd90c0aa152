package goprobe

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/timeout-tracer/tracer/gobin"
)

// loadBias returns how far the kernel moved a position-independent
// executable: runtime address = link-time address + bias. Return addresses
// read from a PIE process must have it subtracted before symbolizing.
// Non-PIE executables have bias 0.
func loadBias(pid int, bin *gobin.Binary) (uint64, error) {
	if !bin.PIE {
		return 0, nil
	}
	f, err := elf.Open(bin.AttachPath)
	if err != nil {
		return 0, fmt.Errorf("read program headers: %w", err)
	}
	defer f.Close()
	var first *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && (first == nil || p.Off < first.Off) {
			first = p
		}
	}
	if first == nil {
		return 0, fmt.Errorf("no loadable segment in %s", bin.AttachPath)
	}
	mf, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, fmt.Errorf("read mappings: %w", err)
	}
	defer mf.Close()
	sc := bufio.NewScanner(mf)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		ino, _ := strconv.ParseUint(fields[4], 10, 64)
		off, _ := strconv.ParseUint(fields[2], 16, 64)
		if ino != bin.File.Ino || off != first.Off&^0xfff {
			continue
		}
		start, err := strconv.ParseUint(strings.SplitN(fields[0], "-", 2)[0], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("parse mapping %q: %w", sc.Text(), err)
		}
		return start - first.Vaddr&^0xfff, nil
	}
	return 0, fmt.Errorf("executable not found in /proc/%d/maps", pid)
}

package gobin

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of them; match
// them with errors.Is. Errors from Open and OpenPID are *OpenError values.
var (
	// ErrNotGo means the file is not an ELF executable built by the Go
	// toolchain (no Go build information).
	ErrNotGo = errors.New("not a Go executable")
	// ErrGoTooOld means the executable predates Go's register ABI
	// (amd64 before Go 1.17, arm64 before Go 1.18), whose calling
	// convention the probes rely on.
	ErrGoTooOld = errors.New("Go version predates the register ABI")
	// ErrUnsupportedArch means the ELF machine is neither amd64 nor arm64.
	ErrUnsupportedArch = errors.New("unsupported architecture")
	// ErrCorrupt means the file claims to be a Go ELF executable but a
	// structure the analysis needs is malformed or missing.
	ErrCorrupt = errors.New("corrupt Go executable")
	// ErrNotFound means a function, call site or struct field was not
	// found in the executable.
	ErrNotFound = errors.New("not found")
	// ErrNoOffsets means the executable has no DWARF and its Go version
	// is not covered by the generated offsets table.
	ErrNoOffsets = errors.New("no field offsets for this Go version")
)

// OpenError explains why an executable was refused or could not be read.
// Kind is one of ErrNotGo, ErrGoTooOld, ErrUnsupportedArch or ErrCorrupt, or
// an I/O error.
type OpenError struct {
	Path   string // the path that was opened
	Kind   error  // the class of the failure, matched with errors.Is
	Reason string // a human-readable reason, e.g. "Go 1.16.15 on amd64 (need ≥ 1.17)"
}

// Error implements error.
func (e *OpenError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("open Go binary %s: %v", e.Path, e.Kind)
	}
	return fmt.Sprintf("open Go binary %s: %v: %s", e.Path, e.Kind, e.Reason)
}

// Unwrap returns Kind, so errors.Is(err, ErrNotGo) works.
func (e *OpenError) Unwrap() error { return e.Kind }

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// recoverCorrupt turns a panic from a standard-library parser (debug/gosym
// and debug/dwarf are not hardened against hostile input) into an ErrCorrupt
// error stored in *err. Use as: defer recoverCorrupt(&err, "parse pclntab").
func recoverCorrupt(err *error, what string) {
	if r := recover(); r != nil {
		*err = corruptf("%s: parser panic: %v", what, r)
	}
}

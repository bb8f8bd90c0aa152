package gobin

// Temporary: the old tables, kept until the new layouts are compared with them.
type offsetKey struct{ release, arch, typ, path string }

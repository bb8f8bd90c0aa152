package gobin

import "fmt"

// Symbolize describes pc as "function (file:line)" using the pclntab, which
// stripped binaries keep. For a PC inside inlined code the file and line
// are those of the inlined source, the function the one it was inlined
// into. A PC outside every function is returned in hex.
func (b *Binary) Symbolize(pc uint64) string {
	p, err := b.lineTable()
	if err != nil {
		return fmt.Sprintf("%#x", pc)
	}
	file, line, fn := p.table.PCToLine(pc)
	if fn == nil {
		return fmt.Sprintf("%#x", pc)
	}
	if file == "" {
		return fn.Name
	}
	return fmt.Sprintf("%s (%s:%d)", fn.Name, file, line)
}

package gobin

import "fmt"

// Symbolize describes the innermost logical frame at pc as "function
// (file:line)" using the pclntab, which stripped binaries keep: for a PC
// inside inlined code, the inlined function with its own file and line (see
// Frames). A PC outside every function is returned in hex.
func (b *Binary) Symbolize(pc uint64) string {
	frames := b.Frames(pc)
	if len(frames) == 0 {
		return fmt.Sprintf("%#x", pc)
	}
	return frames[0].String()
}

// SymbolizeFrames describes every logical frame at pc as Symbolize does,
// innermost first, ending with the physical function. A PC outside every
// function gives a single element, the PC in hex.
func (b *Binary) SymbolizeFrames(pc uint64) []string {
	frames := b.Frames(pc)
	if len(frames) == 0 {
		return []string{fmt.Sprintf("%#x", pc)}
	}
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.String()
	}
	return out
}

// String formats f as "function (file:line)", or the function alone when
// its position is unknown.
func (f Frame) String() string {
	if f.File == "" || f.File == "?" {
		return f.Function
	}
	return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
}

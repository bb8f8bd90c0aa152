package gobin

import (
	"bytes"
	"fmt"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// maxFuncSize bounds how much code is decoded for one function, so a corrupt
// function table cannot make the analysis read a whole file.
const maxFuncSize = 16 << 20

// instKind classifies decoded instructions by what the analysis needs.
type instKind uint8

const (
	kindOther    instKind = iota
	kindInvalid           // bytes that do not decode (padding, data)
	kindRet               // return to caller
	kindCall              // call; target is set for direct calls
	kindBranchLS          // amd64 JBE / arm64 B.LS: the stack check's jump to morestack
)

// inst is an architecture-neutral summary of one decoded instruction.
type inst struct {
	pc         uint64
	size       int
	kind       instKind
	target     uint64   // direct call target, 0 for indirect calls
	refs       []uint64 // data addresses referenced PC-relatively
	stackGuard bool     // reads g.stackguard0 ([R14+16] on amd64, [X28+16] on arm64)
}

// endbr64 is the CET landing pad that x86asm does not know. Go code has none,
// but code linked externally (cgo) may.
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// disassemble decodes fn linearly from Entry to End, the instruction set
// chosen by the target's ELF machine. Undecodable bytes (alignment padding:
// INT3 on amd64, zero words on arm64) become kindInvalid and decoding
// resynchronises at the next byte (amd64) or word (arm64).
func (b *Binary) disassemble(fn Func) ([]inst, error) {
	if fn.End <= fn.Entry || fn.End-fn.Entry > maxFuncSize {
		return nil, corruptf("function %s has range %#x–%#x", fn.Name, fn.Entry, fn.End)
	}
	code, err := b.read(fn.Entry, fn.End-fn.Entry)
	if err != nil {
		return nil, fmt.Errorf("read code of %s: %w", fn.Name, err)
	}
	switch b.Arch {
	case "amd64":
		return decodeAMD64(code, fn.Entry), nil
	case "arm64":
		return decodeARM64(code, fn.Entry, b), nil
	}
	return nil, fmt.Errorf("disassemble %s: %w: %s", fn.Name, ErrUnsupportedArch, b.Arch)
}

func decodeAMD64(code []byte, base uint64) []inst {
	var out []inst
	for off := 0; off < len(code); {
		pc := base + uint64(off)
		if bytes.HasPrefix(code[off:], endbr64) {
			out = append(out, inst{pc: pc, size: len(endbr64)})
			off += len(endbr64)
			continue
		}
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil || in.Len == 0 {
			out = append(out, inst{pc: pc, size: 1, kind: kindInvalid})
			off++
			continue
		}
		next := pc + uint64(in.Len)
		i := inst{pc: pc, size: in.Len}
		switch in.Op {
		case x86asm.RET:
			i.kind = kindRet
		case x86asm.CALL:
			i.kind = kindCall
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				i.target = next + uint64(int64(rel))
			}
		case x86asm.JBE:
			i.kind = kindBranchLS
		}
		for _, a := range in.Args {
			m, ok := a.(x86asm.Mem)
			if !ok {
				continue
			}
			switch {
			case m.Base == x86asm.RIP:
				i.refs = append(i.refs, next+uint64(m.Disp))
			case in.Op == x86asm.CMP && m.Base == x86asm.R14 && m.Index == 0 && m.Disp == 16:
				i.stackGuard = true
			}
		}
		out = append(out, i)
		off += in.Len
	}
	return out
}

// arm64 encodings whose immediates arm64asm does not export.
const (
	a64AddImmMask, a64AddImm = 0xff800000, 0x91000000 // ADD Xd, Xn, #imm{, LSL #12}
	a64LdrXMask, a64LdrX     = 0xffc00000, 0xf9400000 // LDR Xt, [Xn, #imm*8]
	a64LdrWMask, a64LdrW     = 0xffc00000, 0xb9400000 // LDR Wt, [Xn, #imm*4]
	a64LdpXMask, a64LdpX     = 0xffc00000, 0xa9400000 // LDP Xt1, Xt2, [Xn, #imm*8]
	a64BcondMask, a64Bcond   = 0xff000010, 0x54000000 // B.cond
	a64CondLS                = 9
	a64RegG                  = 28 // Go's g register on arm64
)

func decodeARM64(code []byte, base uint64, b *Binary) []inst {
	var out []inst
	pages := map[uint32]uint64{} // register → address built by ADRP (+ADD)
	for off := 0; off+4 <= len(code); off += 4 {
		pc := base + uint64(off)
		w := b.order.Uint32(code[off:])
		i := inst{pc: pc, size: 4}
		in, err := arm64asm.Decode(code[off : off+4])
		if err != nil {
			i.kind = kindInvalid
			out = append(out, i)
			continue
		}
		rd, rn := w&31, (w>>5)&31
		switch in.Op {
		case arm64asm.RET:
			i.kind = kindRet
		case arm64asm.BL:
			i.kind = kindCall
			if rel, ok := in.Args[0].(arm64asm.PCRel); ok {
				i.target = pc + uint64(int64(rel))
			}
			clear(pages)
		case arm64asm.BLR:
			i.kind = kindCall
			clear(pages)
		case arm64asm.ADRP:
			if rel, ok := in.Args[1].(arm64asm.PCRel); ok {
				pages[rd] = pc&^0xfff + uint64(int64(rel))
			}
		}
		switch {
		case w&a64BcondMask == a64Bcond && w&0xf == a64CondLS:
			i.kind = kindBranchLS
		case w&a64AddImmMask == a64AddImm:
			imm := uint64(w>>10) & 0xfff
			if w&(1<<22) != 0 {
				imm <<= 12
			}
			if p, ok := pages[rn]; ok {
				pages[rd] = p + imm
				i.refs = append(i.refs, p+imm)
			}
		case w&a64LdrXMask == a64LdrX:
			imm := (uint64(w>>10) & 0xfff) * 8
			if rn == a64RegG && imm == 16 {
				i.stackGuard = true
			}
			if p, ok := pages[rn]; ok {
				i.refs = append(i.refs, p+imm)
			}
		case w&a64LdrWMask == a64LdrW:
			if p, ok := pages[rn]; ok {
				i.refs = append(i.refs, p+(uint64(w>>10)&0xfff)*4)
			}
		case w&a64LdpXMask == a64LdpX:
			imm7 := int64(w>>15) & 0x7f
			if imm7 >= 64 {
				imm7 -= 128
			}
			if p, ok := pages[rn]; ok {
				i.refs = append(i.refs, p+uint64(imm7*8), p+uint64(imm7*8)+8)
			}
		}
		out = append(out, i)
	}
	return out
}

// Returns lists the address of every return instruction of fn (RET on both
// architectures), where entry uprobes stand in for the uretprobes that Go's
// moving stacks forbid. Tail calls (a JMP to another function) are not
// returns and are not listed.
func (b *Binary) Returns(fn Func) ([]uint64, error) {
	insts, err := b.disassemble(fn)
	if err != nil {
		return nil, err
	}
	var rets []uint64
	for _, i := range insts {
		if i.kind == kindRet {
			rets = append(rets, i.pc)
		}
	}
	if len(rets) == 0 {
		return nil, fmt.Errorf("find returns of %s: %w", fn.Name, ErrNotFound)
	}
	return rets, nil
}

// prologueWindow is how many leading instructions may hold the stack check:
// ENDBR64, then for large frames an address computation (LEAQ, or MOVQ+SUBQ+
// JCS for huge ones), the compare and the branch.
const prologueWindow = 8

// AfterPrologue returns the address of the first instruction after fn's
// stack-check prologue (amd64: CMP SP, 16(R14); JBE morestack; arm64: LDR
// R16, 16(g); CMP; B.LS morestack). A probe there fires once per call,
// whereas one at Entry fires again whenever morestack grows the stack and
// restarts the function. Functions without a stack check (frameless leaves,
// NOSPLIT) return fn.Entry.
func (b *Binary) AfterPrologue(fn Func) (uint64, error) {
	insts, err := b.disassemble(fn)
	if err != nil {
		return 0, err
	}
	guard := false
	for n, i := range insts {
		if n >= prologueWindow || i.kind == kindInvalid || i.kind == kindRet || i.kind == kindCall {
			break
		}
		if i.stackGuard {
			guard = true
		}
		if guard && i.kind == kindBranchLS {
			return i.pc + uint64(i.size), nil
		}
	}
	return fn.Entry, nil
}

// CallSites returns the addresses of the direct CALL (amd64) / BL (arm64)
// instructions in fn whose target is callee's entry. A uprobe on such an
// address fires before the call with the callee's arguments in registers.
func (b *Binary) CallSites(fn, callee Func) ([]uint64, error) {
	insts, err := b.disassemble(fn)
	if err != nil {
		return nil, err
	}
	var sites []uint64
	for _, i := range insts {
		if i.kind == kindCall && i.target == callee.Entry {
			sites = append(sites, i.pc)
		}
	}
	return sites, nil
}

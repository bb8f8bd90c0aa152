/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Go's internal register ABI (Go >= 1.17 on amd64, >= 1.18 on arm64), read
 * from a uprobe's pt_regs. Integer arguments and results go in registers in
 * this order; the current goroutine's g is in a fixed register.
 */
#ifndef TT_GOABI_H
#define TT_GOABI_H

#if defined(__TARGET_ARCH_x86)
#define GO_ARG1(r) ((r)->ax)
#define GO_ARG2(r) ((r)->bx)
#define GO_ARG3(r) ((r)->cx)
#define GO_ARG4(r) ((r)->di)
#define GO_ARG5(r) ((r)->si)
#define GO_ARG6(r) ((r)->r8)
#define GO_ARG7(r) ((r)->r9)
#define GO_G(r) ((r)->r14)
/* The closure context register: a closure's captured variables, at its entry. */
#define GO_CLOSURE(r) ((r)->dx)
#define GO_SP(r) ((r)->sp)
#define GO_FP(r) ((r)->bp)
/* At a function's entry (before it pushes a frame) the return address is on top of the stack. */
#define GO_HAS_LR 0
#elif defined(__TARGET_ARCH_arm64)
#define GO_REG(r, n) (((const struct user_pt_regs *)(r))->regs[n])
#define GO_ARG1(r) GO_REG(r, 0)
#define GO_ARG2(r) GO_REG(r, 1)
#define GO_ARG3(r) GO_REG(r, 2)
#define GO_ARG4(r) GO_REG(r, 3)
#define GO_ARG5(r) GO_REG(r, 4)
#define GO_ARG6(r) GO_REG(r, 5)
#define GO_ARG7(r) GO_REG(r, 6)
#define GO_G(r) GO_REG(r, 28)
#define GO_CLOSURE(r) GO_REG(r, 26)
#define GO_SP(r) (((const struct user_pt_regs *)(r))->sp)
#define GO_FP(r) GO_REG(r, 29)
/* The return address is in the link register until the function saves it. */
#define GO_HAS_LR 1
#define GO_LR(r) GO_REG(r, 30)
#else
#error "unsupported architecture: define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

#endif

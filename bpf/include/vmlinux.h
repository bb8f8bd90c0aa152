/* Picks the CO-RE header for the BPF target architecture. bpf2go passes
 * -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64 per target. See README.md. */
#ifndef __TT_VMLINUX_DISPATCH_H__
#define __TT_VMLINUX_DISPATCH_H__

#if defined(__TARGET_ARCH_x86)
#include "amd64/vmlinux.h"
#elif defined(__TARGET_ARCH_arm64)
#include "arm64/vmlinux.h"
#else
#error "vmlinux.h: define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

#endif /* __TT_VMLINUX_DISPATCH_H__ */

#include "textflag.h"

// func spin(n uint64)
// n iterations of a loop with no call and no safe point: the runtime
// cannot preempt an assembly function, so a stop of the world waits for
// it to return.
TEXT ·spin(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	TESTQ CX, CX
	JZ done
loop:
	DECQ CX
	JNZ loop
done:
	RET

#include "textflag.h"

// func spin(n uint64)
// n iterations of a loop with no call and no safe point: the runtime
// cannot preempt an assembly function, so a stop of the world waits for
// it to return.
TEXT ·spin(SB), NOSPLIT, $0-8
	MOVD n+0(FP), R0
	CBZ R0, done
loop:
	SUB $1, R0
	CBNZ R0, loop
done:
	RET

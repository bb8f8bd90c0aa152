package correlate

import (
	"math/rand/v2"
	"testing"
)

// TestCookieIndex checks the hash table against a map under random puts
// and deletes, including the backward shift that closes holes.
func TestCookieIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x cookieIndex
	want := map[uint64]int32{}
	for i := range 200_000 {
		ck := 1 + rng.Uint64N(3000)
		switch rng.IntN(3) {
		case 0, 1:
			x.put(ck, int32(i))
			want[ck] = int32(i)
		case 2:
			x.del(ck)
			delete(want, ck)
		}
		if i%1000 == 0 {
			for k := uint64(1); k <= 3000; k++ {
				got, ok := x.get(k)
				w, wok := want[k]
				if ok != wok || got != w {
					t.Fatalf("step %d: get(%d) = %d, %v; want %d, %v", i, k, got, ok, w, wok)
				}
			}
		}
	}
	if x.n != len(want) {
		t.Fatalf("n = %d, want %d", x.n, len(want))
	}
	if _, ok := x.get(0); ok {
		t.Fatal("cookie 0 found")
	}
}

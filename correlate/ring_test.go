package correlate

import (
	"slices"
	"testing"
)

func TestRingKeepsTheNewest(t *testing.T) {
	for capacity := 1; capacity <= 4; capacity++ {
		var r ring[int]
		evicted := 0
		for v := 1; v <= 10; v++ {
			if r.push(v, capacity) {
				evicted++
			}
			var got []int
			for i := 0; i < r.len(); i++ {
				got = append(got, *r.at(i))
			}
			var want []int
			for w := max(1, v-capacity+1); w <= v; w++ {
				want = append(want, w)
			}
			if !slices.Equal(got, want) || *r.newest() != v {
				t.Fatalf("capacity %d after %d: %v, want %v", capacity, v, got, want)
			}
		}
		if evicted != 10-capacity {
			t.Errorf("capacity %d: %d evicted", capacity, evicted)
		}
		r.reset()
		if r.len() != 0 || r.newest() != nil {
			t.Error("reset left items")
		}
	}
}

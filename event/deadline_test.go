package event

import (
	"testing"
	"time"
	"unsafe"
)

// goTimeWords reads the wall and ext words of a time.Time the way the probes
// read them from a traced process: straight from memory.
func goTimeWords(t time.Time) (uint64, int64) {
	type words struct {
		wall uint64
		ext  int64
		loc  unsafe.Pointer
	}
	w := (*words)(unsafe.Pointer(&t))
	return w.wall, w.ext
}

func TestGoTime(t *testing.T) {
	for name, tm := range map[string]time.Time{
		"monotonic":    time.Now().Add(1500 * time.Millisecond),
		"no monotonic": time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC),
		"past":         time.Date(1999, 1, 1, 0, 0, 0, 1, time.UTC),
		"far future":   time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		wall, ext := goTimeWords(tm)
		if got := GoTime(wall, ext); !got.Equal(tm) {
			t.Errorf("%s: decoded %v, want %v", name, got, tm)
		}
	}
}

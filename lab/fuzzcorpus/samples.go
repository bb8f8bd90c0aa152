package fuzzcorpus

import (
	"sync"
	"testing"
)

// Samples keeps at most Per raw samples for each key (the record's kind),
// so a corpus holds each kind of record the kernel wrote a few times.
type Samples struct {
	Per  int
	mu   sync.Mutex
	seen map[string][][]byte
}

// Add keeps a copy of raw under key, unless key has Per already.
func (s *Samples) Add(key string, raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string][][]byte{}
	}
	if len(s.seen[key]) < s.Per {
		s.seen[key] = append(s.seen[key], append([]byte(nil), raw...))
	}
}

// Write writes every sample kept into testdata/fuzz/<fuzzName>.
func (s *Samples) Write(t *testing.T, fuzzName string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, raws := range s.seen {
		for _, raw := range raws {
			if err := Write("testdata/fuzz", fuzzName, key, raw); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%s: %d kinds of record", fuzzName, len(s.seen))
}

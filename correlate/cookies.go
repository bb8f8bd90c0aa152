package correlate

// cookieIndex maps socket cookies to socket slots: an open-addressing hash
// table with linear probing, in one flat slice. The kernel gives every
// socket a distinct, never zero cookie, and the lookup runs once per
// event: a probe here reads one cache line where a Go map reads its
// directory, a control word and a slot group.
type cookieIndex struct {
	slots []cookieSlot // len a power of two; cookie 0: empty
	n     int
	shift uint8 // 64 - log2(len(slots))
}

type cookieSlot struct {
	cookie uint64
	slot   int32
}

func (x *cookieIndex) home(cookie uint64) int {
	// Fibonacci hashing: cookies are sequential, the multiply spreads them.
	return int((cookie * 0x9e3779b97f4a7c15) >> x.shift)
}

// get returns cookie's slot.
func (x *cookieIndex) get(cookie uint64) (int32, bool) {
	if x.n == 0 || cookie == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	for j := x.home(cookie); ; j = (j + 1) & mask {
		switch s := &x.slots[j]; s.cookie {
		case cookie:
			return s.slot, true
		case 0:
			return 0, false
		}
	}
}

// put sets cookie's slot; cookie must not be 0.
func (x *cookieIndex) put(cookie uint64, slot int32) {
	if (x.n+1)*2 > len(x.slots) { // at most half full: short probes
		x.grow()
	}
	mask := len(x.slots) - 1
	for j := x.home(cookie); ; j = (j + 1) & mask {
		s := &x.slots[j]
		if s.cookie == cookie {
			s.slot = slot
			return
		}
		if s.cookie == 0 {
			*s = cookieSlot{cookie, slot}
			x.n++
			return
		}
	}
}

// del removes cookie, shifting the entries after it back so that no probe
// sequence has a hole (no tombstones to sweep).
func (x *cookieIndex) del(cookie uint64) {
	if x.n == 0 || cookie == 0 {
		return
	}
	mask := len(x.slots) - 1
	j := x.home(cookie)
	for x.slots[j].cookie != cookie {
		if x.slots[j].cookie == 0 {
			return
		}
		j = (j + 1) & mask
	}
	x.n--
	for k := (j + 1) & mask; ; k = (k + 1) & mask {
		s := x.slots[k]
		if s.cookie == 0 {
			break
		}
		// s may move to the hole at j when j lies cyclically in [home, k).
		if h := x.home(s.cookie); (k-h)&mask >= (k-j)&mask {
			x.slots[j] = s
			j = k
		}
	}
	x.slots[j] = cookieSlot{}
}

func (x *cookieIndex) grow() {
	old := x.slots
	size := max(64, 2*len(old))
	x.slots = make([]cookieSlot, size)
	x.shift = uint8(64 - bitsLen(size-1))
	x.n = 0
	for _, s := range old {
		if s.cookie != 0 {
			x.put(s.cookie, s.slot)
		}
	}
}

func bitsLen(v int) int {
	n := 0
	for ; v > 0; v >>= 1 {
		n++
	}
	return n
}

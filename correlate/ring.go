package correlate

// ring keeps the newest capacity items; pushing into a full ring overwrites
// the oldest. The newest item lives inline, in its owner's struct: the hot
// path (extending the current activity run, repeating a binding) then
// touches one cache line instead of chasing the buffer. The buffer of older
// items is allocated once per table slot and reused when the slot is, so
// steady-state pushes allocate nothing.
type ring[T any] struct {
	head T     // the newest item, when has
	buf  []T   // older items, at most capacity-1
	next int32 // when buf is full: its oldest item, overwritten next
	has  bool
}

// push appends v and reports whether the oldest item was dropped.
func (r *ring[T]) push(v T, capacity int) (evicted bool) {
	_, evicted = r.pushOut(v, capacity)
	return evicted
}

// pushOut appends v and returns the oldest item when it was dropped.
func (r *ring[T]) pushOut(v T, capacity int) (out T, evicted bool) {
	if !r.has {
		r.head, r.has = v, true
		return out, false
	}
	old := r.head
	r.head = v
	if capacity <= 1 {
		return old, true
	}
	if len(r.buf) < capacity-1 {
		if r.buf == nil {
			r.buf = make([]T, 0, min(capacity-1, 8))
		}
		r.buf = append(r.buf, old)
		return out, false
	}
	out = r.buf[r.next]
	r.buf[r.next] = old
	if r.next++; int(r.next) == len(r.buf) {
		r.next = 0
	}
	return out, true
}

func (r *ring[T]) len() int {
	if !r.has {
		return 0
	}
	return len(r.buf) + 1
}

// at returns the i-th item, oldest first.
func (r *ring[T]) at(i int) *T {
	if i == len(r.buf) {
		return &r.head
	}
	j := int(r.next) + i
	if j >= len(r.buf) { // not %: a division per step shows in profiles
		j -= len(r.buf)
	}
	return &r.buf[j]
}

// newest returns the last pushed item, or nil.
func (r *ring[T]) newest() *T {
	if !r.has {
		return nil
	}
	return &r.head
}

// reset empties the ring and keeps its buffer.
func (r *ring[T]) reset() {
	var zero T
	r.head, r.has = zero, false
	r.buf = r.buf[:0]
	r.next = 0
}

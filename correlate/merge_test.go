package correlate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/timeout-tracer/tracer/event"
	"github.com/timeout-tracer/tracer/record"
)

func monos(evs []event.Any) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.MonoTime())
	}
	return out
}

func TestMergeReleasesBelowTheSlowestSource(t *testing.T) {
	m := NewMerge(2)
	var got []event.Any
	collect := func(ev event.Any) error { got = append(got, ev); return nil }
	m.Add(&event.TCP{Mono: 30})
	m.Add(&event.TCP{Mono: 10})
	m.Add(&event.Deadline{Mono: 20})
	m.Progress(0, 100)
	if w, _ := m.Release(collect); w != 0 || len(got) != 0 {
		t.Fatalf("released %v at watermark %d while source 1 had said nothing", monos(got), w)
	}
	m.Progress(1, 25)
	if w, _ := m.Release(collect); w != 25 || len(got) != 2 || got[0].MonoTime() != 10 || got[1].MonoTime() != 20 {
		t.Fatalf("watermark %d released %v, want [10 20]", w, monos(got))
	}
	m.Progress(1, 5) // marks never go back
	if m.Watermark() != 25 {
		t.Fatalf("watermark went back to %d", m.Watermark())
	}
	m.Add(&event.Binding{Mono: 15}) // behind the release: late, still delivered
	if m.Late() != 1 {
		t.Fatalf("late %d, want 1", m.Late())
	}
	m.Done(1)
	got = got[:0]
	if w, _ := m.Release(collect); w != 100 || len(got) != 2 || got[0].MonoTime() != 15 || got[1].MonoTime() != 30 {
		t.Fatalf("after source 1 ended: watermark %d released %v", w, monos(got))
	}
	m.Add(&event.TCP{Mono: 500})
	got = got[:0]
	stop := errors.New("stop")
	if err := m.Drain(func(event.Any) error { return stop }); !errors.Is(err, stop) || m.Buffered() != 0 {
		t.Fatalf("drain: %v, %d left", err, m.Buffered())
	}
}

// readerOf splits a recording into the sources the live pipeline merges.
func readerOf(ev event.Any) int {
	switch ev.(type) {
	case *event.TCP, *event.SockActivity:
		return 0
	case *event.Deadline:
		return 1
	case *event.Binding:
		return 2
	case *event.Local:
		return 3
	}
	return 4
}

func readAll(t *testing.T, path string) []event.Any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := record.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Any
	for {
		ev, err := r.Read()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

type sliceSource struct{ evs []event.Any }

func (s *sliceSource) Read() (event.Any, error) {
	if len(s.evs) == 0 {
		return nil, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func reportsJSON(t *testing.T, rs []Report) []string {
	t.Helper()
	var out []string
	for _, r := range rs {
		b, err := json.Marshal(struct {
			D event.Deadline
			C Cause
		}{r.Deadline, r.Cause})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// The merge is on event time: every recording of testdata, its sources'
// events arriving as the live readers hand them over (each source polled on
// its own 100 ms schedule) and one source delayed by seconds, gives exactly
// the reports of the recording replayed in order, none late.
func TestDelayedSourceSameVerdicts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.events"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for _, path := range files {
		evs := readAll(t, path)
		var want []Report
		if _, err := Replay(&sliceSource{evs: evs}, StreamConfig{}, Outputs{ReportFunc: func(r *Report) error {
			want = append(want, *r)
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		wantJ := reportsJSON(t, want)
		for delayed := 0; delayed < 5; delayed++ {
			const nsrc = 5
			delay := [nsrc]uint64{}
			for i := range delay {
				delay[i] = uint64(i*17%100) * uint64(time.Millisecond) // each reader on its own phase
			}
			delay[delayed] = 3 * uint64(time.Second)
			var got []Report
			s, err := NewStream(StreamConfig{}, Outputs{ReportFunc: func(r *Report) error {
				got = append(got, *r)
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			m := NewMerge(nsrc)
			queues := make([][]event.Any, nsrc)
			for _, ev := range evs {
				queues[readerOf(ev)] = append(queues[readerOf(ev)], ev)
			}
			start, end := evs[0].MonoTime(), evs[len(evs)-1].MonoTime()+4*uint64(time.Second)
			for now := start; now < end; now += 100 * uint64(time.Millisecond) {
				for src := range queues {
					q := queues[src]
					for len(q) > 0 && q[0].MonoTime()+delay[src] <= now {
						m.Add(q[0])
						q = q[1:]
					}
					queues[src] = q
					if now >= delay[src] {
						m.Progress(src, now-delay[src])
					}
				}
				w, err := m.Release(s.Push)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Advance(w); err != nil {
					t.Fatal(err)
				}
			}
			for src := range queues {
				m.Done(src)
			}
			if err := m.Drain(s.Push); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if m.Late() != 0 {
				t.Errorf("%s, source %d delayed: %d events late", path, delayed, m.Late())
			}
			gotJ := reportsJSON(t, got)
			if len(gotJ) != len(wantJ) {
				t.Errorf("%s, source %d delayed: %d reports, want %d", path, delayed, len(gotJ), len(wantJ))
				continue
			}
			for i := range gotJ {
				if gotJ[i] != wantJ[i] {
					t.Errorf("%s, source %d delayed: report %d differs:\n got %s\nwant %s", path, delayed, i, gotJ[i], wantJ[i])
				}
			}
		}
	}
}

// With Keep (the node agent), the kernel TCP events of processes it does
// not keep reach neither the join nor, unless KernelAll, Output.Kernel:
// the TCP metrics count the traced processes' sockets (and sockets of no
// known owner, which the join keeps too).
func TestStreamKernelFollowsKeep(t *testing.T) {
	for _, all := range []bool{false, true} {
		var kernel, events []uint32
		out := Outputs{
			KernelFunc: func(e *event.TCP) error { kernel = append(kernel, e.PID); return nil },
			EventFunc:  func(ev event.Any) error { events = append(events, ev.(*event.TCP).PID); return nil },
		}
		s, err := NewStream(StreamConfig{Keep: func(pid uint32, _ uint64) bool { return pid == 7 }, KernelAll: all}, out)
		if err != nil {
			t.Fatal(err)
		}
		for i, pid := range []uint32{7, 8, 0} {
			if err := s.Push(&event.TCP{Mono: uint64(i+1) * 1000, PID: pid, Kind: event.TCPRTO, Cookie: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
		}
		wantKernel := []uint32{7, 0}
		if all {
			wantKernel = []uint32{7, 8, 0}
		}
		if fmt.Sprint(kernel) != fmt.Sprint(wantKernel) || fmt.Sprint(events) != "[7 0]" {
			t.Errorf("KernelAll %v: kernel %v, want %v; events %v, want [7 0]", all, kernel, wantKernel, events)
		}
	}
}

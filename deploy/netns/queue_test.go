package netns

import (
	"bytes"
	"testing"
	"time"
)

const us = time.Microsecond

func slots(n, size int) [][]byte {
	s := make([][]byte, n)
	for i := range s {
		s[i] = make([]byte, size)
	}
	return s
}

// receive fills the free slots as recvmmsg would, with frames "a", "b",
// ..., and pushes those not dropped.
func receive(q *delayQueue, frames string, dropped map[byte]bool, now time.Duration) {
	bufs := q.freeSlots(len(frames), nil)
	kept := 0
	for i := range bufs {
		bufs[i][0] = frames[i]
		if dropped[frames[i]] {
			continue
		}
		q.push(i-kept, 1, now)
		kept++
	}
}

func released(q *delayQueue, now time.Duration) (string, time.Duration) {
	var b bytes.Buffer
	fs := q.ready(now, 64, nil)
	for _, f := range fs {
		b.Write(f)
	}
	return b.String(), q.pop(len(fs), now)
}

// Frames leave in arrival order, none before its due time, each at the
// first release at or after it, with the frames dropped on arrival
// (loss, a cut) gone and the rest intact.
func TestDelayQueueReleasesInOrderAtTheDueTime(t *testing.T) {
	q := newDelayQueue(100*us, slots(8, 4))
	receive(q, "abc", map[byte]bool{'b': true}, 0)
	receive(q, "de", map[byte]bool{'d': true}, 30*us)
	if w, ok := q.wait(40 * us); !ok || w != 60*us {
		t.Errorf("wait at 40µs = %v, %v; want 60µs until a is due", w, ok)
	}
	for _, c := range []struct {
		now  time.Duration
		want string
		late time.Duration
	}{
		{99 * us, "", 0},
		{100 * us, "ac", 0},
		{129 * us, "", 0},
		{135 * us, "e", 5 * us},
	} {
		got, late := released(q, c.now)
		if got != c.want || late != c.late {
			t.Errorf("at %v released %q, %v late; want %q, %v late", c.now, got, late, c.want, c.late)
		}
	}
	if _, ok := q.wait(200 * us); ok {
		t.Error("an empty queue waits for a frame")
	}
}

// A full queue receives nothing more (the relay drops what arrives) and
// reuses the slot freed last first, so only the slots ever in flight at
// once are touched.
func TestDelayQueueFullAndSlotReuse(t *testing.T) {
	s := slots(4, 2)
	q := newDelayQueue(10*us, s)
	receive(q, "abcd", nil, 0)
	if !q.full() || len(q.freeSlots(4, nil)) != 0 {
		t.Fatalf("4 frames in 4 slots: full %v, free %d", q.full(), len(q.freeSlots(4, nil)))
	}
	if got, _ := released(q, 10*us); got != "abcd" {
		t.Fatalf("released %q", got)
	}
	for i := 0; i < 3; i++ {
		receive(q, "x", nil, 20*us)
		released(q, 30*us)
	}
	// Three frames one at a time went through the same slot.
	used := 0
	for _, b := range s {
		if b[0] == 'x' {
			used++
		}
	}
	if used != 1 {
		t.Errorf("one frame at a time used %d slots, want 1", used)
	}
}

// sleeper stands in for ppoll: a sleep that runs out ends late by over(i)
// for the i-th sleep.
type sleeper struct {
	now   time.Duration
	over  func(i int) time.Duration
	count int
}

// relayOnce is one turn of the relay's loop for one direction whose only
// traffic is already queued: sleep as the pacer says (or poll, 1 µs),
// then release what is due. It returns the frames' lateness.
func relayOnce(q *delayQueue, p *pacer, s *sleeper) (sent int, late time.Duration) {
	if w, ok := q.wait(s.now); ok && w > 0 {
		if d := p.sleep(w); d > 0 {
			got := d + s.over(s.count)
			s.count++
			s.now += got
			p.woke(d, got)
		} else {
			s.now += us
		}
	}
	fs := q.ready(s.now, 64, nil)
	return len(fs), q.pop(len(fs), s.now)
}

// The pacer learns how late sleeps wake and sleeps that much less: a
// frame leaves within a few microseconds of its due time although every
// sleep overshoots by 25 µs, and relearns after a sleep the host delayed
// by milliseconds.
func TestPacerReleasesFramesOnTime(t *testing.T) {
	for _, c := range []struct {
		name    string
		over    func(i int) time.Duration
		outlier int // the frame after which one sleep overshoots by 10 ms
		maxLate time.Duration
	}{
		{"steady 25µs overshoot", func(int) time.Duration { return 25 * us }, -1, 2 * us},
		{"jitter 15-35µs", func(i int) time.Duration { return time.Duration(15+(i*7)%21) * us }, -1, 12 * us},
		{"an outlier", func(int) time.Duration { return 25 * us }, 50, 2 * us},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newDelayQueue(100*us, slots(4, 1))
			var p pacer
			s := &sleeper{over: c.over}
			var lates []time.Duration
			for f := 0; f < 150; f++ {
				over := s.over
				if f == c.outlier {
					s.over = func(int) time.Duration { return 10 * time.Millisecond }
				}
				receive(q, "f", nil, s.now)
				for q.size > 0 {
					if n, late := relayOnce(q, &p, s); n > 0 {
						lates = append(lates, late)
					}
					s.over = over
				}
				s.now += 300 * us // the next frame comes later
			}
			// After 20 frames of learning and, with the outlier, 30 of
			// relearning.
			for f, late := range lates {
				if f >= 20 && !(f >= c.outlier && f < c.outlier+30) && late > c.maxLate {
					t.Errorf("frame %d left %v late; want at most %v once the pacer has learned", f, late, c.maxLate)
				}
			}
			if p.over > 40*us {
				t.Errorf("the pacer expects a %v overshoot, more than the sleeps have", p.over)
			}
		})
	}
}

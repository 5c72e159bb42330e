package netns

import "time"

// delayQueue holds the frames of one direction of the link from their
// arrival until their due time, in arrival order: every frame gets the
// same delay, so the head is always the first due. Its slots are given
// once and reused; the relay receives into free slots and sends from
// due ones, so a frame is never copied in user space. Free slots are
// reused last-freed first, so only as many slots as were ever in flight
// at once are touched (the memory of the others is never paged in). It
// reads no clock: times come in as arguments, so its release rule is
// tested without waiting.
type delayQueue struct {
	delay      time.Duration
	slots      [][]byte
	n          []int           // the length of the frame in each slot
	due        []time.Duration // when each slot's frame leaves, on the relay's clock
	free       []int           // free slots, the next to fill last
	fifo       []int           // queued slots, a ring from head
	head, size int
}

// newDelayQueue queues frames in slots (each as long as the longest
// frame) for delay.
func newDelayQueue(delay time.Duration, slots [][]byte) *delayQueue {
	q := &delayQueue{delay: delay, slots: slots, n: make([]int, len(slots)), due: make([]time.Duration, len(slots)),
		free: make([]int, len(slots)), fifo: make([]int, len(slots))}
	for i := range q.free {
		q.free[i] = len(slots) - 1 - i
	}
	return q
}

// freeSlots returns up to max free slots: the buffers to receive the
// next frames into.
func (q *delayQueue) freeSlots(max int, into [][]byte) [][]byte {
	into = into[:0]
	for i := len(q.free) - 1; i >= 0 && len(into) < max; i-- {
		into = append(into, q.slots[q.free[i]])
	}
	return into
}

// push queues the frame received into the k-th of the slots freeSlots
// returned (k from 0, less the frames pushed since: the frames before
// it that were dropped), n bytes long, arrived at now.
func (q *delayQueue) push(k, n int, now time.Duration) {
	top := len(q.free) - 1
	q.free[top], q.free[top-k] = q.free[top-k], q.free[top]
	s := q.free[top]
	q.free = q.free[:top]
	q.fifo[(q.head+q.size)%len(q.fifo)] = s
	q.n[s], q.due[s] = n, now+q.delay
	q.size++
}

// full reports whether no slot is free: a frame arriving now is dropped,
// as a router's full queue drops.
func (q *delayQueue) full() bool { return len(q.free) == 0 }

// wait is how long from now until the head frame is due: 0 when it is
// due, and ok false when the queue is empty.
func (q *delayQueue) wait(now time.Duration) (d time.Duration, ok bool) {
	if q.size == 0 {
		return 0, false
	}
	return max(q.due[q.fifo[q.head]]-now, 0), true
}

// ready returns up to max frames due at now, head first, without
// removing them: send them, then pop as many as were sent.
func (q *delayQueue) ready(now time.Duration, max int, into [][]byte) [][]byte {
	into = into[:0]
	for i := 0; i < q.size && i < max; i++ {
		s := q.fifo[(q.head+i)%len(q.fifo)]
		if q.due[s] > now {
			break
		}
		into = append(into, q.slots[s][:q.n[s]])
	}
	return into
}

// pop removes k frames from the head, sent at now, and returns the time
// they were past their due, summed.
func (q *delayQueue) pop(k int, now time.Duration) (late time.Duration) {
	for range k {
		s := q.fifo[q.head]
		late += now - q.due[s]
		q.free = append(q.free, s)
		q.head = (q.head + 1) % len(q.fifo)
		q.size--
	}
	return late
}

// pacer decides how long the relay sleeps before a frame is due. A
// sleep overshoots: waking a thread costs tens of microseconds here (a
// virtual machine's timer interrupt, an idle core's wake-up), a quarter
// of a data-centre link's 0.1 ms delay. The pacer learns the overshoot
// from the sleeps that ran out (a moving average of the last few) and
// sleeps that much less; the relay polls the rest, a few microseconds
// on average, which costs far less CPU than spinning a fixed margin.
type pacer struct {
	over time.Duration // the overshoot expected
}

// maxOvershoot bounds what the pacer learns: a sleep that overslept by
// more was delayed by something other than the wake-up (the host
// descheduled the whole machine), which later sleeps will not repeat.
const maxOvershoot = 200 * time.Microsecond

// sleep is how long to sleep when the next frame is due in wait: 0 means
// do not sleep, poll.
func (p *pacer) sleep(wait time.Duration) time.Duration { return max(wait-p.over, 0) }

// woke tells the pacer that a sleep of asked ran out after slept.
func (p *pacer) woke(asked, slept time.Duration) {
	o := min(max(slept-asked, 0), maxOvershoot)
	p.over += (o - p.over) / 8
}

//go:build linux

package netns

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A frame's delay counts from the kernel's arrival time, carried in its
// control message, not from when the relay's thread woke to receive it;
// arrivals never go back (frames leave in order), and a timestamp from
// before a wall clock step is ignored.
func TestArrivalCountsFromTheKernelsTimestamp(t *testing.T) {
	d := &direction{msgs: make([]unix.Mmsghdr, batch), ctrl: make([]byte, batch*ctrlLen)}
	stamp := func(i int, wall int64) {
		c := d.ctrl[i*ctrlLen:][:ctrlLen]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
		h.SetLen(unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))))
		*(*unix.Timespec)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = unix.NsecToTimespec(wall)
		d.msgs[i].Hdr.SetControllen(ctrlLen)
	}
	const wall = int64(1_800_000_000_000_000_000)
	now := 10 * time.Millisecond
	stamp(0, wall-int64(60*time.Microsecond)) // the thread woke 60 µs after it arrived
	stamp(1, wall-int64(80*time.Microsecond)) // earlier than the frame before it
	stamp(2, wall+int64(time.Millisecond))    // the wall clock went back since
	stamp(3, wall-int64(5*time.Second))       // ... or forward
	// 4: no control message
	want := []time.Duration{now - 60*time.Microsecond, now - 60*time.Microsecond, now, now, now}
	for i, w := range want {
		if got := d.arrival(i, now, wall); got != w {
			t.Errorf("frame %d arrived at %v, want %v", i, got, w)
		}
	}
}

package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
	"github.com/rs/zerolog"
)

// freezer plays SIGSTOP on one rank's connections: just before the rank
// writes data frame number frame of operation seq, its reads and writes stop
// (the kernel still holds the sockets open, as for a stopped process) until
// thaw is closed; then they go on.
type freezer struct {
	seq   uint64
	frame int

	mu     sync.Mutex
	sent   int
	frozen bool
	thaw   chan struct{}
}

func (f *freezer) isFrozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thaw:
		return false // resumed (SIGCONT)
	default:
		return f.frozen
	}
}

type frozenConn struct {
	conn
	f      *freezer
	toNext bool
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if c.toNext && len(b) == wire.HeaderSize {
		if h, err := wire.DecodeHeader(b); err == nil && h.Kind == wire.KindData && h.Seq == c.f.seq {
			c.f.mu.Lock()
			if c.f.sent++; c.f.sent == c.f.frame {
				c.f.frozen = true
			}
			c.f.mu.Unlock()
		}
	}
	if c.f.isFrozen() {
		<-c.f.thaw
	}
	// Write a copy: the race detector marks a write's buffer as read only
	// after the syscall returns, and by then the ring may have brought the
	// same chunk back into it (the all-gather), a race on paper only. The
	// ring's own writes go through writev, which the detector does not mark.
	return c.conn.Write(append([]byte(nil), b...))
}

func (c *frozenConn) Read(b []byte) (int, error) {
	n, err := c.conn.Read(b)
	if c.f.isFrozen() {
		<-c.f.thaw
	}
	return n, err
}

func (c *frozenConn) CloseWrite() error {
	if c.f.isFrozen() {
		return nil // a stopped process sends no FIN
	}
	return c.conn.CloseWrite()
}

// A rank stopped in the middle of an all-reduce, after sending all but its
// last frame, is the rank every other rank's error names. Before the fix
// the stopped rank's successor (blocked waiting for that last frame, and so
// silent itself) was blamed by its own successor, which had finished the
// operation, started the next one and timed out first (the chaos suite's
// "rank 0 sent nothing for 10s (reported by rank 1)" with rank 2 stopped).
func TestStoppedRankIsBlamedByEveryRank(t *testing.T) {
	// Each rank sends 2(n-1) data frames in an all-reduce of one segment per
	// block; the stopped rank freezes before data frame number frame of
	// operation 2: the last (the case the chaos suite found), the first,
	// or one in the middle.
	for _, tc := range []struct{ size, stopped, frame int }{{3, 2, 4}, {4, 1, 6}, {3, 0, 1}, {4, 3, 3}} {
		t.Run(fmt.Sprintf("%d-ranks-stop-%d-before-frame-%d", tc.size, tc.stopped, tc.frame), func(t *testing.T) {
			f := &freezer{seq: 2, frame: tc.frame, thaw: make(chan struct{})}
			groups := frozenGroup(t, tc.size, tc.stopped, 2*time.Second, f)

			errs := make([]error, tc.size)
			var wg sync.WaitGroup
			stoppedDone := make(chan struct{})
			go func() {
				defer close(stoppedDone)
				for range 2 {
					if groups[tc.stopped].AllReduce(context.Background(), make([]float32, 2*tc.size), collective.Sum) != nil {
						return
					}
				}
			}()
			for r, g := range groups {
				if r == tc.stopped {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = errors.New("no error after 10 operations")
					for range 10 {
						if err := g.AllReduce(context.Background(), make([]float32, 2*tc.size), collective.Sum); err != nil {
							errs[r] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(f.thaw)
			<-stoppedDone
			for r, err := range errs {
				if r == tc.stopped {
					continue
				}
				if !errors.Is(err, collective.ErrTimeout) && !errors.Is(err, collective.ErrPeerLost) {
					t.Errorf("rank %d: %v, want a timeout or a lost peer", r, err)
				}
				if p, ok := collective.PeerOf(err); !ok || p != tc.stopped {
					t.Errorf("rank %d blames rank %d, want the stopped rank %d: %v", r, p, tc.stopped, err)
				}
			}
		})
	}
}

// frozenGroup builds a loopback group of size ranks whose rank
// stopped plays dead through f.
func frozenGroup(t *testing.T, size, stopped int, timeout time.Duration, f *freezer) []collective.Group {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	groups := make([]collective.Group, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cfg := Config{Rank: r, Size: size, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port, Token: "test-token",
			BindAddr: "127.0.0.1", Timeout: timeout, Logger: &nop}
		if r == 0 {
			cfg.Listener = ln
		}
		if r == stopped {
			cfg.wrap = func(c conn, toNext bool) conn { return &frozenConn{c, f, toNext} }
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[r], errs[r] = New(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// A rank whose successor has finished the operation and closed its group
// still completes when its predecessor, a straggler, resumes: its wait
// frames to the closed successor are not an error. (Rank 2 stops before its
// last frame for 5/8 of the timeout; rank 1, which needs nothing more from
// rank 0, finishes and closes; rank 0 waits for rank 2, sending wait frames
// to rank 1 meanwhile.)
func TestWaitFramesToAClosedSuccessorAreNoError(t *testing.T) {
	f := &freezer{seq: 2, frame: 4, thaw: make(chan struct{})}
	const timeout = 4 * time.Second
	groups := frozenGroup(t, 3, 2, timeout, f)
	bufs := make([][]float32, 3)
	run := func(r int) error {
		bufs[r] = make([]float32, 6)
		for i := range bufs[r] {
			bufs[r][i] = float32(r + 1)
		}
		return groups[r].AllReduce(context.Background(), bufs[r], collective.Sum)
	}
	for op := 1; op <= 2; op++ {
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for _, r := range []int{0, 2} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = run(r) }()
		}
		errs[1] = run(1)
		if op == 2 {
			groups[1].Close()
			time.Sleep(timeout * 5 / 8) // rank 2 stays stopped: rank 0 sends two wait frames meanwhile
			close(f.thaw)
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("operation %d, rank %d: %v", op, r, err)
			}
			for _, v := range bufs[r] {
				if v != 6 {
					t.Fatalf("operation %d, rank %d: all-reduce gave %v, want all 6", op, r, bufs[r])
				}
			}
		}
	}
}

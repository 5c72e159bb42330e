package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/tcp"
	"github.com/rs/zerolog"
)

const token = "test-token"

// configs returns n loopback configurations; rank 0's listener is bound to
// port 0 so tests never collide.
func configs(t testing.TB, n int) []tcp.Config {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	cfgs := make([]tcp.Config, n)
	for r := range cfgs {
		cfgs[r] = tcp.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: port, Token: token,
			BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
	}
	cfgs[0].Listener = ln
	return cfgs
}

func build(t testing.TB, cfgs []tcp.Config) []collective.Collective {
	t.Helper()
	return collectivetest.Start(t, len(cfgs), func(r int) (collective.Collective, error) {
		g, err := tcp.New(context.Background(), cfgs[r])
		if err != nil {
			return nil, err // not a nil Group in a non-nil interface
		}
		return g, nil
	})
}

func newGroup(t *testing.T, n int) []collective.Collective { return build(t, configs(t, n)) }

func TestConformance(t *testing.T) { collectivetest.RunAll(t, newGroup) }

type syncBuf struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return string(s.b) }

func TestStrangerRefused(t *testing.T) {
	cfgs := configs(t, 2)
	var logs syncBuf
	l := zerolog.New(&logs)
	cfgs[0].Logger = &l
	// A stranger with the wrong token joins first; rank 0 must refuse it,
	// log it, and still admit the real rank 1.
	type result struct {
		g   collective.Group
		err error
	}
	rank0 := make(chan result, 1)
	go func() {
		g, err := tcp.New(context.Background(), cfgs[0])
		rank0 <- result{g, err}
	}()
	stranger := cfgs[1]
	stranger.Token = "guess"
	if _, err := tcp.New(context.Background(), stranger); err == nil || !contains(err.Error(), "refused") || !contains(err.Error(), "wrong token") {
		t.Fatalf("stranger: got %v, want a refusal naming the token", err)
	}
	g1, err := tcp.New(context.Background(), cfgs[1])
	if err != nil {
		t.Fatal(err)
	}
	r0 := <-rank0
	if r0.err != nil {
		t.Fatal(r0.err)
	}
	cs := []collective.Collective{r0.g, g1}
	defer g1.Close()
	defer r0.g.Close()
	buf := [][]float32{{1}, {2}}
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.AllReduce(context.Background(), buf[r], collective.Sum) }()
	}
	wg.Wait()
	if buf[0][0] != 3 || buf[1][0] != 3 {
		t.Errorf("after refusing the stranger: %v, want [3] [3]", buf)
	}
	if !contains(logs.String(), "refused connection") || !contains(logs.String(), "wrong token") {
		t.Errorf("log does not record the refusal: %q", logs.String())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  tcp.Config
		want string
	}{
		{"no token", tcp.Config{Rank: 0, Size: 2, MasterAddr: "h", MasterPort: 1}, "Token is empty"},
		{"rank past size", tcp.Config{Rank: 2, Size: 2, MasterAddr: "h", MasterPort: 1, Token: "x"}, "Rank is 2"},
		{"no port", tcp.Config{Rank: 1, Size: 2, MasterAddr: "h", Token: "x"}, "MasterPort is 0"},
		{"bad bind", tcp.Config{Rank: 1, Size: 2, MasterAddr: "h", MasterPort: 5, Token: "x", BindAddr: "eth0"}, "BindAddr \"eth0\""},
		{"no addr", tcp.Config{Rank: 1, Size: 2, MasterPort: 5, Token: "x"}, "MasterAddr is empty"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// BenchmarkAllReduce measures plain TCP and TLS side by side, alternating,
// so a loaded machine weighs on both alike:
//
//	go test -run '^$' -bench AllReduce -count 5 ./strategy/collective/tcp
func BenchmarkAllReduce(b *testing.B) {
	ca := newCA(b, "bench CA")
	cert := ca.tls(b, ca.issue(b, "rank"))
	for _, size := range []int{4 << 20, 25 << 20} {
		for _, useTLS := range []bool{false, true} {
			name := byteSize(size)
			if useTLS {
				name += "/tls"
			} else {
				name += "/plain"
			}
			b.Run(name, func(b *testing.B) {
				cfgs := configs(b, 2)
				if useTLS {
					for r := range cfgs {
						cfgs[r].TLS = cert
					}
				}
				benchAllReduce(b, cfgs, size)
			})
		}
	}
}

func benchAllReduce(b *testing.B, cfgs []tcp.Config, size int) {
	cs := build(b, cfgs)
	bufs := make([][]float32, len(cs))
	for r := range bufs {
		bufs[r] = make([]float32, size/4)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < b.N; i++ {
				if err := c.AllReduce(context.Background(), bufs[r], collective.Sum); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func byteSize(n int) string { return strconv.Itoa(n>>20) + "MB" }

// TestSilentPeer: rank 2 never joins the all-reduce; both others must fail
// with ErrTimeout naming rank 2, soon after the timeout. (Rank 1 does not
// time out on rank 0, which sends wait frames while blocked on rank 2.)
func TestSilentPeer(t *testing.T) {
	cfgs := configs(t, 3)
	for r := range cfgs {
		cfgs[r].Timeout = time.Second
	}
	cs := build(t, cfgs)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cs[r].AllReduce(context.Background(), make([]float32, 1<<16), collective.Sum)
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to notice a silent peer with a 1s timeout", d)
	}
	for r, err := range errs {
		if p, ok := collective.PeerOf(err); !ok || p != 2 || !errors.Is(err, collective.ErrTimeout) {
			t.Errorf("rank %d: got %v, want ErrTimeout naming rank 2", r, err)
		}
	}
}

// TestSilentPeerBlame: rank 2 never joins; rank 0, blocked on it, must
// keep rank 1 from timing out on rank 0 (wait frames every quarter of
// rank 0's timeout) although rank 1's own timeout is a third of rank 0's,
// so that both ranks blame rank 2. Small all-reduces of three ranks run on
// the caller's goroutine, large ones with a sender goroutine: each path
// must send the wait frames.
func TestSilentPeerBlame(t *testing.T) {
	for _, c := range []struct {
		name  string
		elems int
	}{{"inline", 1 << 10}, {"gather", 1 << 16}, {"ring", 1 << 20}} {
		t.Run(c.name, func(t *testing.T) {
			cfgs := configs(t, 3)
			cfgs[0].Timeout = 3 * time.Second
			cfgs[1].Timeout = time.Second
			cfgs[2].Timeout = time.Second
			cs := build(t, cfgs)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = cs[r].AllReduce(context.Background(), make([]float32, c.elems), collective.Sum)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if p, ok := collective.PeerOf(err); !ok || p != 2 || !errors.Is(err, collective.ErrTimeout) {
					t.Errorf("rank %d: got %v, want ErrTimeout naming rank 2", r, err)
				}
			}
		})
	}
}

// With SmallBytes at 100 the suite's lengths (up to 1000 elements) run
// through both all-reduce algorithms, and its Sizes case through the ring
// alone.
func TestConformanceSmallBytes(t *testing.T) {
	collectivetest.RunAllWith(t, func(t *testing.T, n int) []collective.Collective {
		cfgs := configs(t, n)
		for r := range cfgs {
			cfgs[r].SmallBytes = 100
		}
		return build(t, cfgs)
	}, collectivetest.Options{MaxRanks: 4})
}

// Ranks that would pick different algorithms for one all-reduce fail it
// with ErrMismatch, naming the setting to fix, instead of misreading frames.
func TestSmallBytesMismatch(t *testing.T) {
	cfgs := configs(t, 3)
	cfgs[1].SmallBytes = -1
	for r, err := range allReduceErrs(build(t, cfgs), 10) {
		if !errors.Is(err, collective.ErrMismatch) || !strings.Contains(err.Error(), "SmallBytes") {
			t.Errorf("rank %d: got %v, want ErrMismatch naming SmallBytes", r, err)
		}
	}
}

// allReduceErrs runs a float32 sum of n zeros on every rank of cs at once
// and returns each rank's error.
func allReduceErrs(cs []collective.Collective, n int) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), make([]float32, n), collective.Sum)
		}()
	}
	wg.Wait()
	return errs
}

// BenchmarkAllReduceSizes times float32 sums over 2 and 4 ranks in this
// process, at sizes on both sides of SmallBytes (4 bytes: the fixed cost of
// an operation):
//
//	go test -run '^$' -bench AllReduceSizes -count 5 ./strategy/collective/tcp
func BenchmarkAllReduceSizes(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, bytes := range []int{4, 64 << 10, 256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, bytes), func(b *testing.B) { benchAllReduce(b, configs(b, n), bytes) })
		}
	}
}

// TestSmallSocketBuffersDoNotDeadlock: two ranks write an operation's data
// before reading only when the kernel takes it without the peer reading;
// with socket buffers smaller than the message, both ranks of a 1 MB
// all-reduce exchanging whole buffers (SmallBytes raised to allow it) and a
// broadcast still finish, with the right values, instead of both waiting
// in a write.
func TestSmallSocketBuffersDoNotDeadlock(t *testing.T) {
	cfgs := configs(t, 2)
	for r := range cfgs {
		cfgs[r].SocketBuffer = 128 << 10
		cfgs[r].SmallBytes = 4 << 20
		cfgs[r].Timeout = 5 * time.Second
	}
	cs := build(t, cfgs)
	const n = 256 << 10 // 1 MB of float32
	errs := make([]error, 2)
	bufs := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, c := range cs {
		bufs[r] = make([]float32, n)
		for i := range bufs[r] {
			bufs[r][i] = float32(r + 1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = c.AllReduce(context.Background(), bufs[r], collective.Sum); errs[r] != nil {
				return
			}
			if r == 0 {
				for i := range bufs[r] {
					bufs[r][i] = float32(i)
				}
			}
			errs[r] = c.Broadcast(context.Background(), bufs[r], 0)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		for i, v := range bufs[r] {
			if v != float32(i) {
				t.Fatalf("rank %d: element %d is %v after the broadcast, want %d", r, i, v, i)
			}
		}
	}
}

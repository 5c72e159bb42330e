package rendezvous_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// A large job's ranks all dial rank 0 at once: more joiners than rank 0
// runs handshakes side by side (64) must wait for a slot, not be turned
// away. (They were closed unanswered and failed with "no challenge: EOF",
// and rank 0 then timed out waiting for them.)
func TestManyRanksJoinAtOnce(t *testing.T) {
	const n = 150
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		cfg := rendezvous.Config{Rank: rank, Size: n, MasterAddr: "127.0.0.1", MasterPort: port, Token: "t",
			BindAddr: "127.0.0.1", Timeout: time.Minute, Logger: &nop}
		if rank == 0 {
			cfg.Listener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(ctx, cfg)
			if err != nil {
				errs[rank] = err
				return
			}
			defer rv.Close()
			if got := rv.Addr(n - 1); got == "" {
				t.Errorf("rank %d: no address for rank %d", rank, n-1)
			}
		}()
	}
	wg.Wait()
	failed := 0
	for rank, err := range errs {
		if err != nil {
			if failed++; failed <= 3 {
				t.Errorf("rank %d: %v", rank, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d ranks failed to meet", failed, n)
	}
}

// Two processes that claim the same rank (two machines started with the
// same node rank): the second is refused at once, and rank 0's timeout,
// which names the ranks that never came, says why they did not: the
// duplicate, with both addresses.
func TestDuplicateRankIsNamedAtTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, zero := rankZeroOfThree(t, ctx)
	nop := zerolog.Nop()
	join := func() <-chan error {
		ch := make(chan error, 1)
		go func() {
			rv, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 3, MasterAddr: "127.0.0.1", MasterPort: port,
				Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop})
			if rv != nil {
				rv.Close()
			}
			ch <- err
		}()
		return ch
	}
	first, second := join(), join()
	var refusal error
	select {
	case refusal = <-first:
	case refusal = <-second:
	}
	if refusal == nil || !strings.Contains(refusal.Error(), "a second process claimed rank 1") {
		t.Errorf("the duplicate rank 1's error is %v, want its refusal", refusal)
	}
	err := <-zero
	for _, want := range []string{"ranks [2] did not join", "a second process claimed rank 1", "the same RANK", "-node-rank"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
}

// Another program holds MASTER_PORT on MASTER_ADDR (a web server that
// waits for a request, an ssh daemon that sends its banner): a joiner's
// error says so and names the variables, instead of a bare "no challenge:
// i/o timeout" with a hint about TLS.
func TestAnotherProgramOnMasterPort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		banner string
	}{
		{"silent", ""},
		{"ssh banner", "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"},
		{"web server's error", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var held []net.Conn
			var mu sync.Mutex
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
					if tc.banner != "" {
						c.Write([]byte(tc.banner))
					}
				}
			}()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range held {
					c.Close()
				}
			}()
			nop := zerolog.Nop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1",
				MasterPort: ln.Addr().(*net.TCPAddr).Port, Token: "t", BindAddr: "127.0.0.1", Timeout: 2 * time.Second, Logger: &nop})
			for _, want := range []string{"another program is using MASTER_PORT", "pick a free MASTER_PORT", "MASTER_ADDR"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v lacks %q", err, want)
				}
			}
			// The program there speaks no TLS (it ignores the probe, or
			// sent its banner): a hint to set the TLS variables is noise.
			if err != nil && strings.Contains(err.Error(), rendezvous.TLSCertEnv) {
				t.Errorf("error %v hints at TLS, which the program on the port does not speak", err)
			}
		})
	}
}

// A MASTER_ADDR that does not resolve is named as such, with the
// variable, when the timeout ends the waiting.
func TestUnresolvableMasterAddr(t *testing.T) {
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Two dots: the resolver refuses the name itself, asking no server.
	_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "node..zero", MasterPort: 29500,
		Token: "t", BindAddr: "127.0.0.1", Timeout: time.Second, Logger: &nop})
	for _, want := range []string{`MASTER_ADDR "node..zero" does not resolve`, "did not answer within the timeout (1s)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// lockedLog is a log written from several goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// While a rank is missing (a machine not started yet), rank 0 says now and
// then that it waits, and for whom, rather than staying silent until the
// timeout; the timeout's error says what to check.
func TestRankZeroSaysWhomItWaitsFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	var log lockedLog
	lg := zerolog.New(&log)
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := make(chan error, 1)
	go func() {
		_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 3, MasterAddr: "127.0.0.1", Listener: ln,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 3 * time.Second, Logger: &lg})
		zero <- err
	}()
	rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 3, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop})
	err = <-zero
	for _, want := range []string{"ranks [2] did not join", "were they started", "MASTER_ADDR", "FULGUR_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
	for _, want := range []string{"rank 0 still waits for ranks to join", `"missing":[2]`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("rank 0's log lacks %q:\n%s", want, log.String())
		}
	}
}

// A rank whose timeout ends before rank 0's (its machine came up first,
// or it was given a shorter FULGUR_TIMEOUT) while a rank never comes waits
// for rank 0's verdict and reports it (the missing rank), rather than
// failing first with a bare read timeout, which a launcher would name as
// the job's failure.
func TestEarlyJoinerReportsRankZerosVerdict(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	early := make(chan error, 1)
	go func() {
		_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 3, MasterAddr: "127.0.0.1", MasterPort: port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 3 * time.Second, Logger: &nop})
		early <- err
	}()
	_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 3, MasterAddr: "127.0.0.1", Listener: ln,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 4 * time.Second, Logger: &nop})
	if err == nil || !strings.Contains(err.Error(), "ranks [2] did not join") {
		t.Errorf("rank 0's error %v, want one naming rank 2", err)
	}
	if err := <-early; err == nil || !strings.Contains(err.Error(), "rank 0 gave up: ranks [2] did not join") {
		t.Errorf("rank 1's error %v, want rank 0's verdict naming rank 2", err)
	}
}

// A rank started before rank 0, or pointed at a machine and port where
// nothing listens, says now and then that it still waits for rank 0, and
// where, rather than staying silent until the timeout (3 minutes by
// default); the timeout's error says what to check, as rank 0's does.
func TestJoinerSaysItWaitsForRankZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now: every dial is refused
	var log lockedLog
	lg := zerolog.New(&log)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 2 * time.Second, Logger: &lg})
	for _, want := range []string{"did not answer within the timeout (2s)", "connection refused",
		"nothing listens at 127.0.0.1:" + strconv.Itoa(port), "was rank 0 started", "MASTER_ADDR", "MASTER_PORT", "FULGUR_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 1's error %v lacks %q", err, want)
		}
	}
	for _, want := range []string{"rank 1 still waits for rank 0 at 127.0.0.1:" + strconv.Itoa(port), "it gives up after 2s"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("rank 1's log lacks %q:\n%s", want, log.String())
		}
	}
}

// A rank started with another FULGUR_TOKEN than rank 0's reaches rank 0
// and is refused: when the timeout ends rank 0's waiting, its error says
// so, rather than asking whether the rank was started at all.
func TestRankZeroNamesAWrongTokenAtTheTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := make(chan error, 1)
	go func() {
		_, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 2, MasterAddr: "127.0.0.1", Listener: ln,
			Token: "ours", BindAddr: "127.0.0.1", Timeout: 2 * time.Second, Logger: &nop})
		zero <- err
	}()
	_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "theirs", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop})
	if err == nil || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("rank 1's error %v does not name the wrong token", err)
	}
	err = <-zero
	for _, want := range []string{"ranks [1] did not join", "a process claiming rank 1", "another FULGUR_TOKEN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "were they started") {
		t.Errorf("rank 0's error %v asks whether a rank that came was started", err)
	}
}

// Rank 0 listens only on BindAddr (the address of the interface that
// FULGUR_SOCKET_IFNAME names) while the other ranks dial MASTER_ADDR: when
// MASTER_ADDR is another address of rank 0's own machine, nothing would
// answer them there (FULGUR_SOCKET_IFNAME=lo on a job of several machines,
// or eth0 with MASTER_ADDR=127.0.0.1). Rank 0 says so at once, naming both,
// instead of waiting out the timeout for ranks that cannot reach it.
func TestRankZeroRefusesAMasterAddrItDoesNotListenOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	nop := zerolog.Nop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// 127.0.0.2 is this machine's (all of 127/8 is), but a socket bound to
	// 127.0.0.1 does not answer there.
	_, err = rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 2, MasterAddr: "127.0.0.2", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 3 * time.Second, Logger: &nop})
	for _, want := range []string{"listen on 127.0.0.1 only", "MASTER_ADDR 127.0.0.2", "FULGUR_SOCKET_IFNAME"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank 0's error %v lacks %q", err, want)
		}
	}
}

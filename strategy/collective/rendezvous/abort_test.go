package rendezvous_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

// A rank that fails before it meets the others (a bad flag, a checkpoint
// missing on its machine) tells them through rank 0: every other rank's
// Meet fails with its rank, host and reason, whichever rank failed and
// whether the others had joined yet. Each waits for at most a timeout
// (five minutes) far beyond the test's own context: a rank that waited
// for the missing one would fail on the context, without the reason.
func TestAbortEndsTheRendezvous(t *testing.T) {
	host, _ := os.Hostname()
	for _, failing := range []int{0, 2} {
		t.Run(map[int]string{0: "rank 0 fails", 2: "rank 2 fails"}[failing], func(t *testing.T) {
			const size = 3
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			nop := zerolog.Nop()
			const reason = "-ckpt-path /data/run/last.ckpt: no such file or directory"
			errs := make([]error, size)
			var wg sync.WaitGroup
			for rank := range size {
				cfg := rendezvous.Config{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, Token: "t",
					BindAddr: "127.0.0.1", Timeout: 5 * time.Minute, Logger: &nop}
				if rank == 0 {
					cfg.Listener = ln
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if rank == failing {
						errs[rank] = rendezvous.Abort(ctx, cfg, reason)
						return
					}
					rv, err := rendezvous.Meet(ctx, cfg)
					if rv != nil {
						rv.Close()
					}
					errs[rank] = err
				}()
			}
			wg.Wait()
			if errs[failing] != nil {
				t.Errorf("rank %d's Abort: %v", failing, errs[failing])
			}
			for rank, err := range errs {
				if rank == failing {
					continue
				}
				var ab *rendezvous.AbortedError
				if !errors.As(err, &ab) {
					t.Errorf("rank %d's Meet returned %v, want the *AbortedError of rank %d", rank, err, failing)
					continue
				}
				if ab.Rank != failing || ab.Host != host || ab.Reason != reason {
					t.Errorf("rank %d heard rank %d on host %q fail with %q, want rank %d on %q with %q", rank, ab.Rank, ab.Host, ab.Reason, failing, host, reason)
				}
				want := "rank " + strconv.Itoa(failing) + " on host " + host + " failed before the job met: " + reason
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d's error %q lacks %q", rank, err, want)
				}
			}
		})
	}
}

// Ending a job takes the token: a process without it that claims to abort
// is refused and logged, and the real ranks go on to meet.
func TestAbortNeedsTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nop := zerolog.Nop()
	var log lockedLog
	lg := zerolog.New(&log)
	zero := make(chan error, 1)
	go func() {
		rv, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 0, Size: 2, MasterAddr: "127.0.0.1", Listener: ln,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 30 * time.Second, Logger: &lg})
		if rv != nil {
			rv.Close()
		}
		zero <- err
	}()
	err = rendezvous.Abort(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "not the job's", BindAddr: "127.0.0.1", Timeout: 30 * time.Second, Logger: &nop}, "stop this job")
	if err == nil || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("the stranger's Abort returned %v, want its refusal for a wrong token", err)
	}
	rv, err := rendezvous.Meet(ctx, rendezvous.Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1", MasterPort: port,
		Token: "t", BindAddr: "127.0.0.1", Timeout: 30 * time.Second, Logger: &nop})
	if err != nil {
		t.Fatalf("rank 1 after the stranger: %v", err)
	}
	rv.Close()
	if err := <-zero; err != nil {
		t.Errorf("rank 0 after the stranger: %v", err)
	}
	if !strings.Contains(log.String(), "wrong token") {
		t.Errorf("rank 0's log does not name the refused stranger:\n%s", log.String())
	}
}

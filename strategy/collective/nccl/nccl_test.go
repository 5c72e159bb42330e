//go:build linux

package nccl_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/nccl"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/rs/zerolog"
)

var (
	standinOnce sync.Once
	standinPath string
	standinErr  error
)

// standin compiles testdata/standin.c (NCCL and CUDA runtime signatures,
// host memory, synchronous collectives) into a shared library.
func standin(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			standinErr = err
			return
		}
		dir, err := osMkdirTemp()
		if err != nil {
			standinErr = err
			return
		}
		standinPath = filepath.Join(dir, "libnccl-standin.so")
		out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-o", standinPath, "testdata/standin.c", "-lpthread").CombinedOutput()
		if err != nil {
			standinErr = errors.New(string(out))
		}
	})
	if standinErr != nil {
		t.Skipf("cannot build the NCCL stand-in with gcc: %v", standinErr)
	}
	return standinPath
}

func newGroup(t *testing.T, n int) []collective.Collective {
	lib := standin(t)
	out, errs := meet(t, n, 20*time.Second, func(int) nccl.Config {
		return nccl.Config{Device: 0, NCCLPath: lib, CUDARTPath: lib, Timeout: 20 * time.Second}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// meet starts n ranks over loopback, rank r calling nccl.New with cfg(r),
// and returns what each got; it fails the test when they have not all
// returned within wait. The groups made are closed when the test ends.
func meet(t *testing.T, n int, wait time.Duration, cfg func(r int) nccl.Config) ([]collective.Collective, []error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	out := make([]collective.Collective, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		rc := rendezvous.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
		if r == 0 {
			rc.Listener = ln
		}
		wg.Go(func() {
			rv, err := rendezvous.Meet(context.Background(), rc)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { rv.Close() })
			out[r], errs[r] = nccl.New(context.Background(), rv, cfg(r))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("nccl.New did not return within %v on every rank", wait)
	}
	t.Cleanup(func() {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
	})
	return out, errs
}

// The stand-in completes collectives synchronously and cannot lose a peer,
// so the closed-peer case is skipped; real NCCL reports it asynchronously.
func TestConformance(t *testing.T) {
	collectivetest.RunAllWith(t, newGroup, collectivetest.Options{SkipKill: true})
}

func TestUnavailable(t *testing.T) {
	lib := standin(t)
	for _, tc := range []struct {
		name string
		cfg  nccl.Config
		want string
	}{
		{"no nccl", nccl.Config{NCCLPath: filepath.Join(t.TempDir(), "libnccl.so.2"), CUDARTPath: lib}, "install NCCL"},
		{"no cudart", nccl.Config{NCCLPath: lib, CUDARTPath: filepath.Join(t.TempDir(), "libcudart.so")}, "install CUDA"},
	} {
		err := nccl.Available(tc.cfg)
		if !errors.Is(err, nccl.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrUnavailable saying %q", tc.name, err, tc.want)
		}
	}
	if err := nccl.Available(nccl.Config{NCCLPath: lib, CUDARTPath: lib}); err != nil {
		t.Errorf("stand-in: %v", err)
	}
}

// On a machine without NCCL, New must fail on every rank with a clear
// message instead of leaving the others waiting.
func TestNewWithoutNCCL(t *testing.T) {
	lib := standin(t)
	missing := filepath.Join(t.TempDir(), "missing.so")
	_, errs := meet(t, 2, 30*time.Second, func(r int) nccl.Config {
		nc := nccl.Config{NCCLPath: lib, CUDARTPath: lib}
		if r == 1 {
			nc.NCCLPath = missing
		}
		return nc
	})
	for r, err := range errs {
		if !errors.Is(err, nccl.ErrUnavailable) {
			t.Errorf("rank %d: got %v, want ErrUnavailable", r, err)
		}
	}
}

// A rank whose device does not exist (more local ranks than GPUs) fails
// with the reason on every rank. Before, the ranks that could set their
// device went on into ncclCommInitRank and waited there for good for the
// rank that gave up (seen on a one-GPU machine under ddp with 2 ranks).
func TestNewWithAMissingDevice(t *testing.T) {
	lib := standin(t)
	_, errs := meet(t, 2, 30*time.Second, func(r int) nccl.Config {
		return nccl.Config{Device: 9 * r, NCCLPath: lib, CUDARTPath: lib, Timeout: 60 * time.Second}
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1: cudaSetDevice(9): invalid device ordinal: this host shows 8 CUDA device(s), 0 to 7") {
			t.Errorf("rank %d: got %v, want rank 1's cudaSetDevice(9) error with the device count", r, err)
		}
	}
}

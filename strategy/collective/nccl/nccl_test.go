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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nop := zerolog.Nop()
	out := make([]collective.Collective, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := rendezvous.Config{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port,
			Token: "t", BindAddr: "127.0.0.1", Timeout: 20 * time.Second, Logger: &nop}
		if r == 0 {
			cfg.Listener = ln
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(context.Background(), cfg)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { rv.Close() })
			out[r], errs[r] = nccl.New(context.Background(), rv, nccl.Config{Device: 0, NCCLPath: lib, CUDARTPath: lib, Timeout: 20 * time.Second})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
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
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	nop := zerolog.Nop()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		cfg := rendezvous.Config{Rank: r, Size: 2, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port, Token: "t", BindAddr: "127.0.0.1", Timeout: 10 * time.Second, Logger: &nop}
		if r == 0 {
			cfg.Listener = ln
		}
		nc := nccl.Config{NCCLPath: lib, CUDARTPath: lib}
		if r == 1 {
			nc.NCCLPath = filepath.Join(t.TempDir(), "missing.so")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rv, err := rendezvous.Meet(context.Background(), cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer rv.Close()
			_, errs[r] = nccl.New(context.Background(), rv, nc)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, nccl.ErrUnavailable) {
			t.Errorf("rank %d: got %v, want ErrUnavailable", r, err)
		}
	}
}

//go:build linux && gpu

package nccl_test

// Tests against the real NCCL and CUDA runtime on a GPU, which the suite
// above runs against the stand-in. Built only with -tags gpu, on a machine
// with a GPU; CI has none:
//
//	go test -tags gpu ./strategy/collective/nccl -run GPU
//
// FULGUR_TEST_NCCL and FULGUR_TEST_CUDART name the libraries when they are
// not on the loader's path (NCCL from pip lives in the venv's
// nvidia/nccl/lib).

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/collectivetest"
	"github.com/fulgur-ml/fulgur/strategy/collective/nccl"
)

func gpuConfig(t *testing.T) nccl.Config {
	t.Helper()
	cfg := nccl.Config{NCCLPath: os.Getenv("FULGUR_TEST_NCCL"), CUDARTPath: os.Getenv("FULGUR_TEST_CUDART"), Timeout: 60 * time.Second}
	if err := nccl.Available(cfg); err != nil {
		t.Fatalf("built with -tags gpu, but: %v", err)
	}
	return cfg
}

// One rank on the GPU: every operation of the conformance suite, host
// buffers staged through device memory, sizes up to 100 MB, sub-groups.
func TestGPUOneRank(t *testing.T) {
	cfg := gpuConfig(t)
	cs, errs := meet(t, 1, time.Minute, func(int) nccl.Config { return cfg })
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	collectivetest.RunRank(t, cs[0])
}

// Two ranks on the one GPU: NCCL refuses a communicator with two ranks on
// one device. New must return that as an error on both ranks, within the
// timeout, rather than hang or crash.
func TestGPUTwoRanksOnOneDevice(t *testing.T) {
	cfg := gpuConfig(t)
	_, errs := meet(t, 2, 3*time.Minute, func(int) nccl.Config { return cfg })
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: New succeeded with two ranks on device 0", r)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

// Two ranks, the second on a device the host lacks (set FULGUR_TEST_MISSING_DEVICE
// to a device index above the host's): both ranks fail within seconds naming
// rank 1's device, rather than rank 0 waiting in ncclCommInitRank for good.
func TestGPUMissingDevice(t *testing.T) {
	cfg := gpuConfig(t)
	dev, err := strconv.Atoi(os.Getenv("FULGUR_TEST_MISSING_DEVICE"))
	if err != nil {
		t.Fatalf("FULGUR_TEST_MISSING_DEVICE=%q: set it to a device index this host lacks", os.Getenv("FULGUR_TEST_MISSING_DEVICE"))
	}
	_, errs := meet(t, 2, 2*time.Minute, func(r int) nccl.Config {
		c := cfg
		c.Device = dev * r
		return c
	})
	want := fmt.Sprintf("rank 1: cudaSetDevice(%d)", dev)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: got %v, want an error saying %q", r, err, want)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

package device

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Device is one piece of hardware a replica runs on.
type Device interface {
	// String names the device in logs and errors: "cpu:0", "fake:3", "cuda:1".
	String() string
	// Kind is the provider name: "cpu", "fake", "cuda".
	Kind() string
	// Index is the device's number among its kind in this process.
	Index() int
	// Do runs f as one unit of work on the device and returns f's error, or
	// the device's own failure (an *Error naming the device).
	Do(ctx context.Context, f func() error) error
}

// ErrFailed is wrapped by every device failure (as opposed to an error of the
// work itself).
var ErrFailed = errors.New("device failed")

// Error is a device's own failure.
type Error struct {
	Device string // the device's String
	Err    error  // wraps ErrFailed
}

func (e *Error) Error() string { return "device " + e.Device + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Provider opens n devices of one kind, index 0..n-1.
type Provider interface {
	// Available reports how many devices of this kind the machine has (0 when
	// none, or the kind cannot be used in this build), and why not.
	Available() (int, error)
	Open(n int) ([]Device, error)
}

var (
	mu        sync.RWMutex
	providers = map[string]Provider{}
)

// Register makes a kind of device available to Open. Providers register in
// an init function of the file that implements them.
func Register(kind string, p Provider) {
	mu.Lock()
	defer mu.Unlock()
	providers[kind] = p
}

// Kinds lists the registered kinds.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(providers))
	for k := range providers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Open returns n devices for an accelerator name: "cpu", "cuda" (alias
// "gpu"), or "auto" (cuda when it is registered and has n devices, else
// cpu). n == -1 means every device of the kind.
func Open(accelerator string, n int) ([]Device, error) {
	if accelerator == "" {
		accelerator = "cpu"
	}
	if accelerator == "gpu" {
		accelerator = "cuda"
	}
	if accelerator == "auto" {
		accelerator = "cpu"
		if p, ok := lookup("cuda"); ok {
			if have, err := p.Available(); err == nil && have > 0 && (n == -1 || have >= n) {
				accelerator = "cuda"
			}
		}
	}
	p, ok := lookup(accelerator)
	if !ok {
		return nil, fmt.Errorf("device kind %q is not available in this build: use one of %v (CUDA needs -tags cuda)", accelerator, Kinds())
	}
	if n == -1 {
		have, err := p.Available()
		if err != nil {
			return nil, fmt.Errorf("count %s devices: %w", accelerator, err)
		}
		n = have
	}
	if n < 1 {
		return nil, fmt.Errorf("%d %s devices asked for: use 1 or more, or -1 for all", n, accelerator)
	}
	return p.Open(n)
}

func lookup(kind string) (Provider, bool) {
	mu.RLock()
	defer mu.RUnlock()
	p, ok := providers[kind]
	return p, ok
}

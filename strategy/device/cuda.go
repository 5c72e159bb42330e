//go:build cuda

package device

import (
	"context"
	"errors"
	"fmt"
)

// The cuda build tag reserves the seam for GPU devices: the provider is
// registered under "cuda" so that strategies and the trainer reach it by
// name, exactly as they reach the CPU. What is missing is the device itself
// (a gorgonia.org/cu context per device and a CUDA VM in strategy/device/engine);
// until then Open reports that clearly instead of running on the CPU.
func init() { Register("cuda", cudaProvider{}) }

// ErrNoCUDA is returned while the CUDA device is not implemented.
var ErrNoCUDA = errors.New("CUDA devices are not implemented yet in this build: the engine runs graphs on the CPU only; use Accelerator \"cpu\"")

type cudaProvider struct{}

func (cudaProvider) Available() (int, error) { return 0, ErrNoCUDA }

func (cudaProvider) Open(n int) ([]Device, error) { return nil, ErrNoCUDA }

// CUDA is one GPU. Do runs f with the device's context current on the
// calling thread once the engine can use it.
type CUDA struct{ index int }

func (c *CUDA) String() string { return fmt.Sprintf("cuda:%d", c.index) }
func (c *CUDA) Kind() string   { return "cuda" }
func (c *CUDA) Index() int     { return c.index }
func (c *CUDA) Do(ctx context.Context, f func() error) error {
	return &Error{Device: c.String(), Err: fmt.Errorf("%w: %w", ErrFailed, ErrNoCUDA)}
}

package device

import (
	"context"
	"fmt"
	"runtime"
)

func init() { Register("cpu", cpuProvider{}) }

// CPU is the host processor. Several CPU devices in one process share the
// cores; they are logical places for replicas, not partitions of the machine.
type CPU struct{ index int }

// NewCPU returns CPU device i.
func NewCPU(i int) *CPU { return &CPU{index: i} }

func (c *CPU) String() string { return fmt.Sprintf("cpu:%d", c.index) }
func (c *CPU) Kind() string   { return "cpu" }
func (c *CPU) Index() int     { return c.index }

// Do runs f on the calling goroutine.
func (c *CPU) Do(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f()
}

type cpuProvider struct{}

// Available is the number of usable cores: "all CPU devices" means one per core.
func (cpuProvider) Available() (int, error) { return runtime.GOMAXPROCS(0), nil }

func (cpuProvider) Open(n int) ([]Device, error) {
	out := make([]Device, n)
	for i := range out {
		out[i] = NewCPU(i)
	}
	return out, nil
}

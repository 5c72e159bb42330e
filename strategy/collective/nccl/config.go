package nccl

import (
	"errors"
	"fmt"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// Config selects the libraries and device.
type Config struct {
	// Device is the CUDA device of this rank (usually its local rank).
	Device int
	// NCCLPath and CUDARTPath are the libraries to load; empty means the
	// system's libnccl.so.2 and libcudart.so (then .so.13, .so.12, .so.11.0).
	NCCLPath   string
	CUDARTPath string
	// Timeout bounds each operation (default collective.DefaultTimeout).
	Timeout time.Duration
}

// Validate fills defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.Device < 0 {
		errs = append(errs, fmt.Errorf("Device is %d: use a CUDA device index (0 or more)", c.Device))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use a positive duration, or 0 for %v", c.Timeout, collective.DefaultTimeout))
	}
	if c.Timeout == 0 {
		c.Timeout = collective.DefaultTimeout
	}
	if len(errs) > 0 {
		return fmt.Errorf("nccl.Config: %w", errors.Join(errs...))
	}
	return nil
}

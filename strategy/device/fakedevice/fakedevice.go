package fakedevice

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/fulgur-ml/fulgur/strategy/device"
)

// Option configures the devices New makes.
type Option func(*config) error

type config struct {
	failAfter map[int]int
}

// FailAt makes device i fail at its first unit of work.
func FailAt(i int) Option { return FailAfter(i, 0) }

// FailAfter makes device i fail at unit of work number runs+1 and every one
// after it (a device that died).
func FailAfter(i, runs int) Option {
	return func(c *config) error {
		if runs < 0 {
			return fmt.Errorf("fakedevice: FailAfter(%d, %d): runs must be 0 or more", i, runs)
		}
		c.failAfter[i] = runs
		return nil
	}
}

// Device is one fake device.
type Device struct {
	index     int
	failAfter int // -1: never
	runs      atomic.Int64
}

// New returns n fake devices, index 0..n-1.
func New(n int, opts ...Option) ([]device.Device, error) {
	if n < 1 {
		return nil, fmt.Errorf("fakedevice: %d devices: use 1 or more", n)
	}
	c := config{failAfter: map[int]int{}}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	out := make([]device.Device, n)
	for i := range out {
		d := &Device{index: i, failAfter: -1}
		if k, ok := c.failAfter[i]; ok {
			d.failAfter = k
		}
		out[i] = d
	}
	for i := range c.failAfter {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("fakedevice: a fault is set on device %d, outside 0..%d", i, n-1)
		}
	}
	return out, nil
}

func (d *Device) String() string { return fmt.Sprintf("fake:%d", d.index) }
func (d *Device) Kind() string   { return "fake" }
func (d *Device) Index() int     { return d.index }

// Runs is the number of units of work the device was given.
func (d *Device) Runs() int { return int(d.runs.Load()) }

// Do runs f, or fails when a fault is due.
func (d *Device) Do(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := d.runs.Add(1)
	if d.failAfter >= 0 && n > int64(d.failAfter) {
		return &device.Error{Device: d.String(), Err: fmt.Errorf("%w: injected fault after %d units of work", device.ErrFailed, d.failAfter)}
	}
	return f()
}

// Package fakedevice gives N logical devices in one process for strategy
// tests, with faults injected on purpose:
//
//	devs, err := fakedevice.New(4, fakedevice.FailAt(3))          // device 3 fails at its first unit of work
//	devs, err := fakedevice.New(2, fakedevice.FailAfter(1, 5))    // device 1 fails after 5 units of work
//
// A fake device runs work on the calling goroutine, like the CPU device, and
// counts it. It must not import strategy or any collective backend.
package fakedevice

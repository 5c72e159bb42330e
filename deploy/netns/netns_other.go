//go:build !linux

package netns

import (
	"context"
	"errors"
	"time"
)

// errNotLinux: network namespaces, veths and the relay's packet sockets
// are Linux's.
var errNotLinux = errors.New("netns: two nodes on one host need Linux (network namespaces, veth, tc); run the scale-out on Linux")

// platformCheck refuses every platform but Linux.
func platformCheck() error { return errNotLinux }

// Relay carries frames between the two nodes; outside Linux there is none
// (Up fails first).
type Relay struct{}

func newRelay(string, string, time.Duration, float64, [2][]int) (*Relay, error) {
	return nil, errNotLinux
}

func checkCPUs([2][]int) error { return errNotLinux }

// alive: outside Linux no process made namespaces for Sweep to remove.
func alive(int) bool { return true }

func (r *Relay) close() error { return nil }

// Cut, Frames, Dropped, Stats and Realtime: see the Linux relay.
func (r *Relay) Cut()              {}
func (r *Relay) Frames() int64     { return 0 }
func (r *Relay) Dropped() int64    { return 0 }
func (r *Relay) Stats() RelayStats { return RelayStats{} }
func (r *Relay) Realtime() bool    { return false }

// Probe fails outside Linux.
func (p *Pair) Probe(ctx context.Context, rtts, bulk int) (Probe, error) {
	return Probe{}, errNotLinux
}

package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
	"github.com/rs/zerolog"
)

// Config describes this process's place in a TCP group: the rendezvous
// settings (see rendezvous.Config, which Rendezvous returns) and the ring's
// tuning.
type Config struct {
	// The rendezvous settings, documented on rendezvous.Config's fields of
	// the same names (Rendezvous copies them there). Timeout also bounds
	// the wait for a silent peer during operations.
	Rank, Size    int
	MasterAddr    string
	MasterPort    int
	Token         string // required: FULGUR_TOKEN (rendezvous.TokenEnv)
	BindAddr      string
	AdvertiseAddr string
	Listener      net.Listener
	Timeout       time.Duration
	Logger        *zerolog.Logger
	TLS           *rendezvous.TLS // nil: no TLS (rendezvous.TLSFromEnv loads one)

	// SegmentBytes is the pipelining unit of the ring (default 512 KiB).
	SegmentBytes int
	// SocketBuffer is SO_SNDBUF/SO_RCVBUF (default 4 MiB; the kernel may cap it).
	SocketBuffer int
	// SmallBytes is the largest all-reduce, in bytes, that sends whole
	// buffers round the ring and has every rank reduce them in rank order:
	// n-1 steps of latency instead of the ring's 2(n-1), for n-1 buffer
	// lengths sent instead of 2(n-1)/n. With two ranks both send one
	// buffer length, so gathering costs only the reduction of the whole
	// buffer instead of half of it, and saves a step at every size up to
	// where that reduction outweighs it. 0: DefaultSmallBytes (128 KiB),
	// or DefaultPairBytes (4 MiB) in a group of two ranks; negative: always
	// the ring. Every rank must use the same value: ranks that pick
	// different algorithms fail the all-reduce with collective.ErrMismatch.
	SmallBytes int

	// wrap, set only by this package's tests, wraps the ring's connections
	// (toNext: the one to the next rank) to play a stopped process.
	wrap func(c conn, toNext bool) conn
}

// Rendezvous returns the rendezvous part of c.
func (c Config) Rendezvous() rendezvous.Config {
	return rendezvous.Config{Rank: c.Rank, Size: c.Size, MasterAddr: c.MasterAddr, MasterPort: c.MasterPort, Token: c.Token,
		BindAddr: c.BindAddr, AdvertiseAddr: c.AdvertiseAddr, Listener: c.Listener, Timeout: c.Timeout, Logger: c.Logger, TLS: c.TLS}
}

// Validate fills defaults and reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Logger == nil {
		l := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.WarnLevel).With().Timestamp().Int("rank", c.Rank).Str("collective", "tcp").Logger()
		c.Logger = &l
	}
	rc := c.Rendezvous()
	if err := rc.Validate(); err != nil {
		errs = append(errs, errors.Unwrap(err)) // drop its "rendezvous.Config:" prefix
	}
	c.Timeout = rc.Timeout
	if c.SegmentBytes < 0 {
		errs = append(errs, fmt.Errorf("SegmentBytes is %d: use a positive size, or 0 for 512 KiB", c.SegmentBytes))
	}
	c.setRingDefaults()
	if len(errs) > 0 {
		return fmt.Errorf("tcp.Config: %w", errors.Join(errs...))
	}
	return nil
}

// DefaultSmallBytes is Config.SmallBytes's default for three or more
// ranks. Gathering sends n-1 buffer lengths over each link against the
// ring's 2(n-1)/n (twice as many bytes at 4 ranks) to save n-1 steps. With
// 3 and 4 ranks over loopback on a shared 2-core machine (load average
// 6-12, both run on the caller's goroutine), gathering took 20-40% less
// time at 16 and 64 KiB, the two were even at 128 KiB, and the ring took
// 10-20% less at 256 KiB, where the kernel's copies of the extra bytes
// cost more than the steps they save.
const DefaultSmallBytes = 128 << 10

// DefaultPairBytes is Config.SmallBytes's default for a group of two
// ranks. Gathering pays the reduction of the other half of the buffer
// (overlapped with its arrival) to save the ring's second step: a link
// latency and a turnaround, and, on the caller's goroutine, the sender
// goroutine's wake-ups. Two ranks over loopback on a shared 2-core machine
// took 10-35% less time gathering at every size from 256 KiB to 8 MiB
// (load average 2.5-5); in one earlier run the ring won at 25 MiB. 4 MiB
// keeps to the sizes measured more than once.
const DefaultPairBytes = 4 << 20

func (c *Config) setRingDefaults() {
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = 512 << 10
	}
	c.SegmentBytes = min(c.SegmentBytes, wire.MaxData) &^ 7
	if c.SegmentBytes == 0 {
		c.SegmentBytes = 8
	}
	if c.SocketBuffer <= 0 {
		c.SocketBuffer = 4 << 20
	}
	if c.SmallBytes == 0 {
		c.SmallBytes = DefaultSmallBytes
		if c.Size == 2 {
			c.SmallBytes = DefaultPairBytes
		}
	}
}

package rendezvous

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/collective/wire"
	"github.com/rs/zerolog"
)

// TokenEnv is the environment variable launchers use to hand every rank the
// shared token (the library itself never reads the environment).
const TokenEnv = "FULGUR_TOKEN"

// Config describes this process's place in a job.
type Config struct {
	Rank int // this process's rank, 0..Size-1
	Size int // number of ranks

	// MasterAddr:MasterPort is where rank 0 accepts joiners.
	MasterAddr string
	MasterPort int

	// Token is the shared secret every joiner proves it holds; connections
	// without it are refused and logged. Required: set it from FULGUR_TOKEN.
	Token string

	// BindAddr is the local IP address listeners bind to; "" binds all
	// interfaces. AdvertiseAddr is the host other ranks dial to reach this
	// one; "" means MasterAddr for rank 0 and, for the others, the local
	// address of their connection to rank 0.
	BindAddr      string
	AdvertiseAddr string

	// Listener, for rank 0 only, is an already-bound rendezvous listener
	// (tests bind port 0); when nil, rank 0 listens on BindAddr:MasterPort.
	Listener net.Listener

	// Timeout bounds the rendezvous and the wait for a peer to connect
	// (default collective.DefaultTimeout).
	Timeout time.Duration

	// Logger receives refusals and failures (default: stderr, warn level).
	Logger *zerolog.Logger

	// TLS, when set, runs every connection over TLS 1.3 with mutual
	// authentication against the job's CA (see TLS; launchers load it with
	// TLSFromEnv). nil: plain TCP, authenticated by the token alone.
	TLS *TLS
}

// Validate fills defaults and reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Size < 1 {
		errs = append(errs, fmt.Errorf("Size is %d: use the number of ranks (1 or more)", c.Size))
	} else if c.Size > wire.MaxRanks {
		errs = append(errs, fmt.Errorf("Size is %d: at most %d ranks", c.Size, wire.MaxRanks))
	}
	if c.Rank < 0 || (c.Size >= 1 && c.Rank >= c.Size) {
		errs = append(errs, fmt.Errorf("Rank is %d: use 0..%d", c.Rank, c.Size-1))
	}
	if c.Size > 1 {
		if c.Token == "" {
			errs = append(errs, fmt.Errorf("Token is empty: give every rank the same secret in %s (e.g. from `openssl rand -hex 16`)", TokenEnv))
		}
		if c.MasterAddr == "" && !(c.Rank == 0 && c.Listener != nil) {
			errs = append(errs, errors.New("MasterAddr is empty: set it to rank 0's host (MASTER_ADDR)"))
		}
		if c.Listener == nil && (c.MasterPort < 1 || c.MasterPort > 65535) {
			errs = append(errs, fmt.Errorf("MasterPort is %d: use 1..65535 (MASTER_PORT)", c.MasterPort))
		}
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		errs = append(errs, fmt.Errorf("BindAddr %q is not an IP address: use one of this host's addresses, or empty for all", c.BindAddr))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout is %v: use a positive duration, or 0 for %v", c.Timeout, collective.DefaultTimeout))
	}
	if c.Timeout == 0 {
		c.Timeout = collective.DefaultTimeout
	}
	if c.Logger == nil {
		l := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.WarnLevel).With().Timestamp().Int("rank", c.Rank).Logger()
		c.Logger = &l
	}
	if len(errs) > 0 {
		return fmt.Errorf("rendezvous.Config: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Config) masterHostPort() string {
	return net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
}

package ddp

import (
	"context"
	"os"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/collective/rendezvous"
	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// joining is set once this process starts joining its job (connect): from
// then on the other ranks learn of its failure at the rendezvous or from
// the connection they lose, and AbortJoin does nothing. It is the
// process's, as the job's environment is.
var joining atomic.Bool

// AbortJoin tells the other ranks of the job that the launcher's
// environment describes (lookup, os.LookupEnv's shape; nil reads the
// process's) that this process failed before it joined them, and why
// (cause), so that they end at once naming this rank, its host and cause,
// rather than wait FULGUR_TIMEOUT for it: programs call it with the error
// that ends them before their first Fit (a bad flag, a checkpoint or
// dataset missing on this machine); the cli does. A rank other than 0
// waits until rank 0 has heard it (rank 0 may not be listening yet) and
// told every rank, rank 0 until every other rank has heard it, for at
// most FULGUR_TIMEOUT. It does
// nothing and returns nil when no launcher started the process, in a job
// of one rank, under FULGUR_BACKEND=mpi (no rendezvous), without
// FULGUR_TOKEN, or once this process has begun to join its job.
func AbortJoin(ctx context.Context, lookup func(string) (string, bool), cause error) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if cause == nil || joining.Load() {
		return nil
	}
	env, found, err := cluster.Detect(cluster.Lookup(lookup))
	if err != nil || !found || env.WorldSize < 2 || env.MasterAddr == "" {
		return nil // without the rank 0's address there is no one to tell
	}
	// A bad setting may be the cause itself: what was read still serves.
	k, _ := readKnobs(lookup)
	token, _ := lookup(launch.EnvToken)
	if k.backend == "mpi" || token == "" {
		return nil
	}
	// Logged as the trainer's default logger writes (the program has
	// none yet): rank 0 names the ranks that failed as they arrive.
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true, TimeFormat: "15:04:05"}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg := rendezvous.Config{Rank: env.Rank, Size: env.WorldSize, MasterAddr: env.MasterAddr, MasterPort: env.MasterPort,
		Token: token, Timeout: k.timeout, TLS: k.tls, BindAddr: k.sockAddr, AdvertiseAddr: k.sockAddr, Logger: &log}
	if env.Rank == 0 {
		ln, err := launch.InheritedListener(lookup)
		if err != nil {
			return err
		}
		cfg.Listener = ln // nil: Abort listens at MasterPort itself
	}
	return rendezvous.Abort(ctx, cfg, cause.Error())
}

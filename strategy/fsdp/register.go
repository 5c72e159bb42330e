package fsdp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/cluster"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// Environment variables that configure "fsdp" built by name (the trainer's
// Config.Strategy); programs that build FSDP with New set Config instead.
const (
	// EnvWrap is the wrapping policy: "layer" (default) or "size".
	EnvWrap = "FULGUR_FSDP_WRAP"
	// EnvMinUnitParams is the "size" policy's unit size in elements.
	EnvMinUnitParams = "FULGUR_FSDP_MIN_UNIT_PARAMS"
	// EnvReshardAfterForward is "1" (default: free each unit after its
	// forward, gather it again for backward) or "0" (keep it, SHARD_GRAD_OP).
	EnvReshardAfterForward = "FULGUR_FSDP_RESHARD_AFTER_FORWARD"
	// EnvPrefetch is "1" (default: gather the next unit while this one
	// computes) or "0".
	EnvPrefetch = "FULGUR_FSDP_PREFETCH"
	// EnvSyncMicroBatches is "0" (default: micro-batches of an accumulation
	// window keep the whole model's gradient locally and communicate
	// nothing, PyTorch's no_sync) or "1" (reduce-scatter every micro-batch,
	// gradients stay at 1/N): Config.SyncMicroBatches.
	EnvSyncMicroBatches = "FULGUR_FSDP_SYNC_MICROBATCHES"
	// EnvCPUOffload is "1" to ask for the shards in host memory, where
	// they always are in this build (a no-op, logged): Config.CPUOffload.
	EnvCPUOffload = "FULGUR_FSDP_CPU_OFFLOAD"
	// EnvSharding is PyTorch's sharding_strategy: full_shard (default),
	// hybrid_shard, shard_grad_op or no_shard (see Sharding).
	EnvSharding = "FULGUR_FSDP_SHARDING"
	// EnvNodeSize is hybrid_shard's ranks per shard group; by default the
	// launcher's ranks per node (LOCAL_WORLD_SIZE), or the whole job when
	// this process launched it.
	EnvNodeSize = "FULGUR_FSDP_NODE_SIZE"
)

func init() {
	strategy.Register("fsdp", fromOptions)
	strategy.Register("fsdp_hybrid_shard", func(o strategy.Options) (strategy.Strategy, error) {
		return hybridFromOptions(o)
	})
}

// hybridFromOptions is "fsdp" with FULGUR_FSDP_SHARDING=hybrid_shard.
func hybridFromOptions(o strategy.Options) (strategy.Strategy, error) {
	lookup := o.Lookup // strategy.New sets it
	if v, _ := lookup(EnvSharding); strings.TrimSpace(v) != "" {
		if s, err := ParseSharding(v); err != nil || s != HybridShard {
			return nil, fmt.Errorf("strategy \"fsdp_hybrid_shard\": %s=%q asks for another sharding: unset it, or use strategy \"fsdp\"", EnvSharding, v)
		}
	}
	o.Lookup = func(k string) (string, bool) {
		if k == EnvSharding {
			return HybridShard.String(), true
		}
		return lookup(k)
	}
	return fromOptions(o)
}

// fromOptions builds FSDP over the processes a "ddp" strategy starts and
// joins (self-launched local ranks, or the ranks a launcher such as
// torchrun, mpirun or srun describes), found by name so that this package
// does not import another strategy.
func fromOptions(o strategy.Options) (strategy.Strategy, error) {
	cfg, err := configFromEnv(o.Lookup)
	if err != nil {
		return nil, fmt.Errorf("strategy \"fsdp\": %w", err)
	}
	cfg.Log = o.Log
	inner, err := replica.JoinerByName(o, "fsdp")
	if err != nil {
		return nil, err
	}
	return newFSDP(cfg, inner)
}

func configFromEnv(lookup func(string) (string, bool)) (Config, error) {
	var cfg Config
	var errs []error
	switch v, _ := lookup(EnvWrap); strings.ToLower(strings.TrimSpace(v)) {
	case "", "layer":
	case "size":
		cfg.Wrap = WrapSize
	default:
		errs = append(errs, fmt.Errorf("%s=%q: use layer (a unit per layer) or size (units of %s elements)", EnvWrap, v, EnvMinUnitParams))
	}
	if v, ok := lookup(EnvMinUnitParams); ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q: use a positive number of elements, e.g. 1000000", EnvMinUnitParams, v))
		}
		cfg.MinUnitParams = n
	}
	flag := func(name string, def bool) bool {
		v, _ := lookup(name)
		switch strings.TrimSpace(v) {
		case "":
			return def
		case "1", "true":
			return true
		case "0", "false":
			return false
		}
		errs = append(errs, fmt.Errorf("%s=%q: use 1 or 0", name, v))
		return def
	}
	cfg.KeepAfterForward = !flag(EnvReshardAfterForward, true)
	cfg.NoPrefetch = !flag(EnvPrefetch, true)
	cfg.SyncMicroBatches = flag(EnvSyncMicroBatches, false)
	cfg.CPUOffload = flag(EnvCPUOffload, false)
	if v, _ := lookup(EnvSharding); strings.TrimSpace(v) != "" {
		s, err := ParseSharding(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: use full_shard, hybrid_shard, shard_grad_op or no_shard", EnvSharding, v))
		}
		cfg.Sharding = s
		if v, _ := lookup(EnvReshardAfterForward); s == ShardGradOp && strings.TrimSpace(v) != "" && !cfg.KeepAfterForward {
			errs = append(errs, fmt.Errorf("%s=shard_grad_op keeps units gathered after forward, but %s=%q frees them: unset one", EnvSharding, EnvReshardAfterForward, v))
		}
	}
	if cfg.Sharding == HybridShard {
		n, err := nodeSize(lookup)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.NodeSize = n
	}
	return cfg, errors.Join(errs...)
}

// nodeSize is hybrid_shard's ranks per node: FULGUR_FSDP_NODE_SIZE, else
// the launcher's, else 0 (this process launches the job on one node).
func nodeSize(lookup func(string) (string, bool)) (int, error) {
	if v, ok := lookup(EnvNodeSize); ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s=%q: use a positive number of ranks per shard group", EnvNodeSize, v)
		}
		return n, nil
	}
	env, found, err := cluster.Detect(cluster.Lookup(lookup))
	if err != nil || !found {
		return 0, err // ddp, built next, reports a bad launcher environment
	}
	if env.Rank != env.NodeRank*env.LocalWorldSize+env.LocalRank {
		return 0, fmt.Errorf("hybrid_shard: this process is rank %d, local rank %d of %d on node %d, but hybrid_shard's node groups assume ranks numbered node by node (rank = node × %d + local rank): launch with torchrun, srun --distribution=block or mpirun --map-by slot, or set %s", env.Rank, env.LocalRank, env.LocalWorldSize, env.NodeRank, env.LocalWorldSize, EnvNodeSize)
	}
	return env.LocalWorldSize, nil
}

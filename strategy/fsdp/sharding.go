package fsdp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

// Sharding is PyTorch FSDP's sharding_strategy (Lightning's
// FSDPStrategy(sharding_strategy=...)): which ranks a unit is sharded
// across, and whether it is freed between forward and backward.
type Sharding int

const (
	// FullShard shards every unit across all ranks and frees it after its
	// forward (FULL_SHARD, the default).
	FullShard Sharding = iota
	// HybridShard shards within a node and replicates across nodes
	// (HYBRID_SHARD): the ranks of one node share a sharding, and the
	// ranks holding the same shard on every node all-reduce its gradient.
	// Gathers stay on the node's fast links; the cross-node traffic is one
	// all-reduce of a shard per unit. The groups are split from the job's
	// (collective.Splitter) by Config.NodeSize.
	HybridShard
	// ShardGradOp keeps each unit gathered from its forward to its
	// backward (SHARD_GRAD_OP: KeepAfterForward).
	ShardGradOp
	// NoShard replicates everything on every rank and all-reduces
	// gradients, as DDP does (NO_SHARD): shard groups of one rank.
	NoShard
)

var shardingNames = []string{"full_shard", "hybrid_shard", "shard_grad_op", "no_shard"}

func (s Sharding) String() string {
	if s >= 0 && int(s) < len(shardingNames) {
		return shardingNames[s]
	}
	return fmt.Sprintf("Sharding(%d)", int(s))
}

// ParseSharding reads a sharding strategy by PyTorch's name, in either
// case: full_shard, hybrid_shard, shard_grad_op or no_shard.
func ParseSharding(name string) (Sharding, error) {
	for i, n := range shardingNames {
		if strings.EqualFold(strings.TrimSpace(name), n) {
			return Sharding(i), nil
		}
	}
	return 0, fmt.Errorf("sharding strategy %q: use one of %s", name, strings.Join(shardingNames, ", "))
}

// shardingProblems checks the sharding settings of cfg for a job of world
// ranks; byName: built by name, where NodeSize 0 means one node.
func shardingProblems(cfg Config, world int, byName bool) []error {
	var errs []error
	if cfg.Sharding < FullShard || cfg.Sharding > NoShard {
		errs = append(errs, fmt.Errorf("Sharding is %v: use FullShard, HybridShard, ShardGradOp or NoShard", cfg.Sharding))
	}
	if cfg.Sharding != FullShard && cfg.Sharding != ShardGradOp && cfg.ShardGroup != nil {
		errs = append(errs, fmt.Errorf("Sharding is %v and ShardGroup and ReplicaGroup are set: set one or the other (Sharding splits the groups itself)", cfg.Sharding))
	}
	if cfg.NodeSize < 0 {
		errs = append(errs, fmt.Errorf("NodeSize is %d: use the number of ranks per node", cfg.NodeSize))
	}
	if cfg.Sharding != HybridShard || cfg.NodeSize < 0 {
		return errs
	}
	switch {
	case cfg.NodeSize == 0 && !byName:
		errs = append(errs, errors.New("Sharding is HybridShard but NodeSize is 0: set the number of ranks per node (ranks k×NodeSize to (k+1)×NodeSize-1 share node k)"))
	case cfg.NodeSize > 0 && world > 0 && world%cfg.NodeSize != 0:
		errs = append(errs, fmt.Errorf("NodeSize is %d but the job has %d ranks: HybridShard needs nodes of equal size, so NodeSize must divide the number of ranks", cfg.NodeSize, world))
	}
	return errs
}

// splitForSharding makes the shard and replica groups that HybridShard and
// NoShard train over, split from the job's group f.c: every rank calls it
// at the same point of Setup.
func (f *FSDP) splitForSharding(ctx context.Context) error {
	var node, local int // the shard group's color and this rank's place in it
	switch f.cfg.Sharding {
	case HybridShard:
		size := f.cfg.NodeSize
		if size == 0 {
			size = f.job.World() // built by name without a launcher: one node
		}
		if f.job.World()%size != 0 {
			return fmt.Errorf("%s: NodeSize %d does not divide the %d ranks of the job: nodes must have equal numbers of ranks", f.cfg.Sharding, size, f.job.World())
		}
		node, local = f.job.Rank()/size, f.job.Rank()%size
	case NoShard:
		node, local = f.job.Rank(), 0
	default:
		return nil
	}
	sp, ok := f.c.(collective.Splitter)
	if !ok {
		return fmt.Errorf("%s: the job's group (%T) cannot split into sub-groups", f.cfg.Sharding, f.c)
	}
	shard, err := sp.Split(ctx, node, local)
	if err != nil {
		return fmt.Errorf("%s: split the shard groups: %w", f.cfg.Sharding, err)
	}
	replica, err := sp.Split(ctx, local, node)
	if err != nil {
		shard.Close()
		return fmt.Errorf("%s: split the replica groups: %w", f.cfg.Sharding, err)
	}
	f.sc, f.rc = collective.WithAsync(shard), collective.WithAsync(replica)
	f.job.Closes(f.sc, f.rc)
	f.cfg.Log.Info().Str("sharding", f.cfg.Sharding.String()).Ints("shard_group", collective.Members(shard)).Ints("replica_group", collective.Members(replica)).Msg("fsdp: sharded within the shard group, replicated across the replica group")
	return nil
}

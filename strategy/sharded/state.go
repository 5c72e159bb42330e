package sharded

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// SaveState returns the whole model (every rank holds it) and this rank's
// chunks of the optimizer's buffers, each a span [Lo, Hi) of the global
// buffer of one value per parameter element: merged, the ranks' dicts
// cover every buffer, so any strategy at any world size loads them. With
// o.Full the chunks are all-gathered, unit by unit, and every rank returns
// the buffers whole.
func (s *Sharded) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// The optimizer's buffers come over its bound span, [0, shardLen) of
	// this rank's chunks laid end to end: each is cut back into its chunks.
	sd, err := strategy.SaveReplicaState(s.store, s.opt, s.sched)
	if err != nil {
		return nil, err
	}
	np := s.store.NumParams()
	var out []strategy.Tensor
	for _, t := range sd.Tensors {
		if !strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
			out = append(out, t)
			continue
		}
		if t.Lo != 0 || t.Hi != s.shardLen {
			return nil, fmt.Errorf("%s: the optimizer's %s covers [%d, %d) but this rank's shard is [0, %d)", s.name, t.Name, t.Lo, t.Hi, s.shardLen)
		}
		name := strings.TrimPrefix(t.Name, strategy.OptimizerPrefix)
		if !o.Full {
			out = append(out, replica.OptimizerChunks(name, t.Data64, s.chunks, np)...)
			continue
		}
		whole, err := replica.GatherChunks(ctx, s.c, t.Data64, s.units, s.chunks, np)
		if err != nil {
			return nil, s.fail("all-gather the optimizer's "+t.Name, err)
		}
		out = append(out, strategy.Tensor{Name: t.Name, Dtype: tensor.Float64, Shape: []int{np}, Lo: 0, Hi: np, Data64: whole})
	}
	sd.Tensors = out
	if b, ok := sd.Blobs[strategy.BlobOptimizer]; ok {
		var meta strategy.OptimizerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, err
		}
		meta.Lo, meta.Hi = 0, np // the global buffers the spans are of
		if sd.Blobs[strategy.BlobOptimizer], err = json.Marshal(meta); err != nil {
			return nil, err
		}
	}
	return sd, nil
}

// LoadState loads the whole model, and this rank's chunks of the
// optimizer's buffers from whole buffers or spans of any layout that cover
// them (a dict saved by any strategy at any world size). Nothing changes
// on an error.
func (s *Sharded) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if err := s.check(); err != nil {
		return err
	}
	if sd == nil {
		return strategy.LoadReplicaState(sd, s.store, s.opt, s.sched, 0, s.shardLen)
	}
	if err := sd.Check(); err != nil {
		return err
	}
	// The optimizer is bound to this rank's chunks laid end to end: gather
	// them from sd into one span [0, shardLen) that LoadReplicaState takes.
	local := &strategy.StateDict{Blobs: sd.Blobs}
	done := map[string]bool{}
	for _, t := range sd.Tensors {
		if !strings.HasPrefix(t.Name, strategy.OptimizerPrefix) {
			local.Tensors = append(local.Tensors, t)
			continue
		}
		if done[t.Name] {
			continue
		}
		done[t.Name] = true
		buf, err := replica.LoadOptimizerChunks(sd, strings.TrimPrefix(t.Name, strategy.OptimizerPrefix), s.chunks, s.shardLen)
		if err != nil {
			return err
		}
		local.Tensors = append(local.Tensors, strategy.Tensor{Name: t.Name, Dtype: tensor.Float64, Shape: []int{max(s.store.NumParams(), s.shardLen)}, Lo: 0, Hi: s.shardLen, Data64: buf})
	}
	return strategy.LoadReplicaState(local, s.store, s.opt, s.sched, 0, s.shardLen)
}

package fsdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

// SaveState returns what this rank holds: for every parameter, the spans
// of it inside this rank's chunks (Lo, Hi within the tensor); every buffer
// whole; the optimizer's buffers over this rank's chunks (spans of the
// global [number of parameters] buffer). Merged, the dicts of every rank
// cover every tensor, so LoadState at any world size (or any strategy)
// takes what it holds from them. With o.Full, every rank gets every tensor
// whole (all-gathered unit by unit).
func (f *FSDP) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	st := f.store
	np := st.NumParams()
	sd := &strategy.StateDict{Blobs: map[string][]byte{}}
	for _, e := range st.Entries() {
		if strings.HasPrefix(e.Name, strategy.OptimizerPrefix) {
			return nil, fmt.Errorf("model tensor %q starts with %q, which state dicts reserve for optimizer state: rename it", e.Name, strategy.OptimizerPrefix)
		}
	}
	// Parameters.
	if o.Full {
		for u, un := range f.units {
			whole := f.alloc(un.Hi - un.Lo)
			if err := f.sc.AllGather(ctx, f.local(f.p32, f.p64, f.chunks[u]), whole); err != nil {
				return nil, f.fail("all-gather the parameters of unit "+fmt.Sprint(u), err)
			}
			for _, e := range st.Entries() {
				if e.Buffer || e.Offset < un.Lo || e.Offset >= un.Hi {
					continue
				}
				sd.Tensors = append(sd.Tensors, f.tensor(e, 0, e.Len, whole, e.Offset-un.Lo))
			}
		}
	} else {
		for _, c := range f.chunks {
			for _, e := range st.Entries() {
				a, b := max(c.Lo, e.Offset), min(c.Hi, e.Offset+e.Len)
				if e.Buffer || a >= b {
					continue
				}
				sd.Tensors = append(sd.Tensors, f.tensor(e, a-e.Offset, b-e.Offset, f.shard(f.p32, f.p64), c.Local+a-c.Lo))
			}
		}
	}
	// Buffers, whole on every rank.
	for _, e := range st.Entries() {
		if !e.Buffer {
			continue
		}
		t, err := st.Tensor(e.Name)
		if err != nil {
			return nil, err
		}
		sd.Tensors = append(sd.Tensors, f.tensor(e, 0, e.Len, denseData(t), 0))
	}
	// Optimizer and scheduler.
	os := f.opt.State()
	meta := strategy.OptimizerMeta{Name: f.opt.Name(), Step: os.Step, Lo: 0, Hi: np, Scalars: strategy.JSONFloats(os.Scalars)}
	for name := range os.Buffers {
		meta.Buffers = append(meta.Buffers, name)
	}
	sort.Strings(meta.Buffers)
	for _, name := range meta.Buffers {
		buf := os.Buffers[name]
		if o.Full {
			whole, err := replica.GatherChunks(ctx, f.sc, buf, f.units, f.chunks, np)
			if err != nil {
				return nil, f.fail("all-gather the optimizer's "+name, err)
			}
			sd.Tensors = append(sd.Tensors, strategy.Tensor{Name: strategy.OptimizerPrefix + name, Dtype: tensor.Float64, Shape: []int{np}, Lo: 0, Hi: np, Data64: whole})
			continue
		}
		sd.Tensors = append(sd.Tensors, replica.OptimizerChunks(name, buf, f.chunks, np)...)
	}
	var err error
	if sd.Blobs[strategy.BlobOptimizer], err = json.Marshal(meta); err != nil {
		return nil, fmt.Errorf("encode the optimizer's state: %w", err)
	}
	if f.sched != nil {
		b, err := json.Marshal(strategy.SchedulerMeta{Type: fmt.Sprintf("%T", f.sched), State: strategy.JSONFloats(f.sched.State())})
		if err != nil {
			return nil, fmt.Errorf("encode the scheduler's state: %w", err)
		}
		sd.Blobs[strategy.BlobScheduler] = b
	}
	return sd, nil
}

func (f *FSDP) alloc(n int) any {
	if f.dtype == tensor.Float32 {
		return make([]float32, n)
	}
	return make([]float64, n)
}

func (f *FSDP) shard(b32 []float32, b64 []float64) any {
	if b32 != nil {
		return b32
	}
	return b64
}

// tensor is the span [lo, hi) of e, copied from src at from.
func (f *FSDP) tensor(e module.Entry, lo, hi int, src any, from int) strategy.Tensor {
	t := strategy.Tensor{Name: e.Name, Dtype: f.store.Dtype(), Shape: slices.Clone(e.Shape), Lo: lo, Hi: hi}
	switch s := src.(type) {
	case []float32:
		t.Data32 = slices.Clone(s[from : from+hi-lo])
	case []float64:
		t.Data64 = slices.Clone(s[from : from+hi-lo])
	}
	return t
}

// LoadState takes this rank's chunks of every parameter and of the
// optimizer's buffers, and every buffer whole, from sd (saved by any
// strategy at any world size), after checking everything: nothing changes
// on an error.
func (f *FSDP) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if err := f.check(); err != nil {
		return err
	}
	if sd == nil {
		return errors.New("LoadState: the state dict is nil")
	}
	if err := sd.Check(); err != nil {
		return err
	}
	st := f.store
	if err := strategy.CheckTensors(sd, st); err != nil {
		return err
	}
	// Stage everything, then apply.
	params := make([]float64, f.shardLen)
	for _, c := range f.chunks {
		for _, e := range st.Entries() {
			a, b := max(c.Lo, e.Offset), min(c.Hi, e.Offset+e.Len)
			if e.Buffer || a >= b {
				continue
			}
			v, err := sd.Span(e.Name, a-e.Offset, b-e.Offset)
			if err != nil {
				return err
			}
			copy(params[c.Local+a-c.Lo:], v)
		}
	}
	bufs := map[string][]float64{}
	for _, e := range st.Entries() {
		if e.Buffer {
			v, err := sd.Span(e.Name, 0, e.Len)
			if err != nil {
				return err
			}
			bufs[e.Name] = v
		}
	}
	var ost *optim.State
	if b, ok := sd.Blobs[strategy.BlobOptimizer]; ok {
		var meta strategy.OptimizerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("optimizer state: %w", err)
		}
		if meta.Name != f.opt.Name() {
			return fmt.Errorf("the checkpoint's optimizer is %q but the module configures %q: configure the same optimizer to resume", meta.Name, f.opt.Name())
		}
		ost = &optim.State{Step: meta.Step, Lo: 0, Hi: f.shardLen, Scalars: strategy.Floats(meta.Scalars), Buffers: map[string][]float64{}}
		for _, name := range meta.Buffers {
			buf, err := replica.LoadOptimizerChunks(sd, name, f.chunks, f.shardLen)
			if err != nil {
				return err
			}
			ost.Buffers[name] = buf
		}
	}
	var schedState map[string]float64
	if b, ok := sd.Blobs[strategy.BlobScheduler]; ok {
		var meta strategy.SchedulerMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("scheduler state: %w", err)
		}
		if f.sched == nil {
			return fmt.Errorf("the checkpoint has a %s learning-rate scheduler but the module configures none: configure the same scheduler to resume", meta.Type)
		}
		if typ := fmt.Sprintf("%T", f.sched); typ != meta.Type {
			return fmt.Errorf("the checkpoint's scheduler is %s but the module configures %s: configure the same scheduler to resume (its position is the checkpoint's)", meta.Type, typ)
		}
		schedState = strategy.Floats(meta.State)
	}
	if ost != nil {
		if err := f.opt.LoadState(*ost); err != nil {
			return err
		}
	}
	if schedState != nil {
		if err := f.sched.LoadState(schedState); err != nil {
			return fmt.Errorf("scheduler state: %w", err)
		}
	}
	if f.p32 != nil {
		for i, v := range params {
			f.p32[i] = float32(v)
		}
	} else {
		copy(f.p64, params)
	}
	for name, v := range bufs {
		t, _ := st.Tensor(name)
		switch d := denseData(t).(type) {
		case []float32:
			for i, x := range v {
				d[i] = float32(x)
			}
		case []float64:
			copy(d, v)
		}
	}
	return nil
}

// denseData is t's backing slice ([]float32 or []float64), scalars
// included (Data returns a scalar's value, not its slice).
func denseData(t *tensor.Dense) any {
	if t.Dtype() == tensor.Float32 {
		return t.Float32s()
	}
	return t.Float64s()
}

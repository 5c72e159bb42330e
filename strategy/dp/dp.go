package dp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/collective"
	"github.com/fulgur-ml/fulgur/strategy/device"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

var (
	_ strategy.Strategy = (*DP)(nil)
	_ strategy.Rebinder = (*DP)(nil)
)

func init() {
	strategy.RegisterCheck("dp", checkLayout)
	strategy.Register("dp", func(o strategy.Options) (strategy.Strategy, error) {
		if err := checkLayout(o); err != nil {
			return nil, err
		}
		devs, err := device.Open(o.Accelerator, o.Devices)
		if err != nil {
			return nil, fmt.Errorf("strategy \"dp\": %w", err)
		}
		return NewDP(DPConfig{Devices: devs})
	})
}

func checkLayout(o strategy.Options) error {
	if o.NumNodes > 1 {
		return fmt.Errorf("strategy \"dp\" runs in one process on one machine, but %s is %d: use \"ddp\" across machines", o.Name("NumNodes"), o.NumNodes)
	}
	return nil
}

// DPConfig configures DP.
type DPConfig struct {
	// Devices holds one replica each; at least one.
	Devices []device.Device
}

// DP is data parallelism in one process: one replica per device, run as
// goroutines. Each training batch is cut into one contiguous chunk per
// replica, gradients are summed into replica 0 in replica order (so a run is
// bitwise reproducible), replica 0's optimizer takes one step, and its
// parameters and buffers are copied to the other replicas, which therefore
// stay bit-identical. WorldSize is 1: data is not sharded across processes.
type DP struct {
	devs  []device.Device
	engs  []*replica.Graphs
	ran   []bool // replica has gradients in the current accumulation window
	opt   optim.Optimizer
	sched optim.Scheduler

	subs    []data.Batch
	results []engine.Result
	metrics []module.Metric
	counts  [][]float64 // combined count metrics, per metric index
	sync    *replicaSum // SyncBatchNorm across the replicas; nil for one
	gate    *backwardGate
	// releaseCores ends the replicas' share of the cores
	// (replica.ShareCores) at Teardown; nil for one replica.
	releaseCores func()
}

// NewDP returns a DP strategy over cfg.Devices, or an error naming every
// nil entry.
func NewDP(cfg DPConfig) (*DP, error) {
	if len(cfg.Devices) == 0 {
		return nil, errors.New("strategy dp: no devices: pass at least one (device.Open(\"cpu\", n))")
	}
	var nils []string
	for i, d := range cfg.Devices {
		if d == nil {
			nils = append(nils, fmt.Sprintf("Devices[%d]", i))
		}
	}
	switch len(nils) {
	case 0:
	case 1:
		return nil, fmt.Errorf("strategy dp: %s is nil: pass a device in every entry (device.Open(\"cpu\", n) returns n)", nils[0])
	default:
		return nil, fmt.Errorf("strategy dp: %s and %s are nil: pass a device in every entry (device.Open(\"cpu\", n) returns n)", strings.Join(nils[:len(nils)-1], ", "), nils[len(nils)-1])
	}
	return &DP{devs: cfg.Devices}, nil
}

func (d *DP) Info() strategy.Info { return strategy.Info{Name: "dp", WorldSize: 1, GlobalZero: true} }

func (d *DP) Setup(ctx context.Context, su strategy.Setup) error {
	store, err := module.NewStore(su.Specs, su.Dtype, su.Seed)
	if err != nil {
		return err
	}
	n := len(d.devs)
	d.engs = make([]*replica.Graphs, n)
	if n > 1 {
		d.sync = newReplicaSum(n)
	}
	for i := range d.engs {
		st := store
		if i > 0 {
			st = store.Clone()
		}
		opts := append(replica.StatSyncOption(replicaStatSync{d.sync, i}, n, su.SyncBatchNorm), engine.WithSettingName(su.SettingName))
		d.engs[i] = replica.NewGraphs(engine.New(su.Module, st, su.Fields, replica.Seed(su.Seed, i), opts...))
	}
	if n > 1 {
		d.releaseCores = replica.ShareCores(su.Log, n)
	}
	d.ran = make([]bool, n)
	d.subs = make([]data.Batch, n)
	d.results = make([]engine.Result, n)
	d.gate = newBackwardGate(n)
	if d.opt, d.sched, err = su.NewOptimizer(); err != nil {
		return err
	}
	return d.opt.Bind(0, store.NumParams())
}

// Store is replica 0's parameters, buffers and gradients; nil before Setup.
func (d *DP) Store() *module.Store {
	if len(d.engs) == 0 {
		return nil
	}
	return d.engs[0].Eng.Store()
}

func (d *DP) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	if d.engs == nil {
		return strategy.StepResult{}, errors.New("dp: Step before Setup")
	}
	return replica.RunStep(ctx, replica.Steps{Train: d.trainStep, Eval: d.evalStep, Predict: d.predictStep}, mode, b, o)
}

// ReplicaStores returns every replica's store (replica 0's is Store()); nil
// before Setup.
func (d *DP) ReplicaStores() []*module.Store {
	if len(d.engs) == 0 {
		return nil
	}
	out := make([]*module.Store, len(d.engs))
	for i, e := range d.engs {
		out[i] = e.Eng.Store()
	}
	return out
}

// scatter cuts b into one chunk per replica (the first b.Size%n chunks one
// row longer) and returns how many replicas have rows.
func (d *DP) scatter(b *data.Batch) int {
	n := min(len(d.engs), b.Size)
	for i := 0; i < n; i++ {
		lo := collective.Offset(b.Size, n, i)
		sliceBatch(&d.subs[i], b, lo, lo+collective.BlockLen(b.Size, n, i))
	}
	return n
}

// sliceBatch makes dst view rows [lo, hi) of b without copying.
func sliceBatch(dst, b *data.Batch, lo, hi int) {
	dst.Size, dst.Fields = hi-lo, b.Fields
	if cap(dst.Data) < len(b.Data) {
		dst.Data = make([][]float32, len(b.Data))
	}
	dst.Data = dst.Data[:len(b.Data)]
	for f := range b.Data {
		w := b.Fields[f].Size()
		dst.Data[f] = b.Data[f][lo*w : hi*w]
	}
	dst.Indices, dst.Pad = nil, nil
	if b.Indices != nil {
		dst.Indices = b.Indices[lo:hi]
	}
	if b.Pad != nil {
		dst.Pad = b.Pad[lo:hi]
	}
}

// parallel runs f(0..n-1) on the replicas' devices at once and returns the
// lowest-numbered replica's error, naming its device.
func (d *DP) parallel(ctx context.Context, n int, f func(i int) error) error {
	errs := make([]error, n)
	do := func(i int) {
		errs[i] = d.devs[i].Do(ctx, func() error { return f(i) })
		if errs[i] != nil {
			// Free the replicas waiting for this one in a SyncBatchNorm
			// reduction or before their backward pass.
			err := fmt.Errorf("replica %d on %s failed: %w", i, d.devs[i], errs[i])
			if d.sync != nil {
				d.sync.abort(err)
			}
			d.gate.abort(err)
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(i)
		}()
	}
	do(0)
	wg.Wait()
	if i, err := firstCause(errs); err != nil {
		return fmt.Errorf("replica %d on %s: %w", i, d.devs[i], err)
	}
	return nil
}

func (d *DP) trainStep(ctx context.Context, b *data.Batch, o strategy.TrainOptions) (float64, []module.Metric, error) {
	scale := o.Scale
	if scale == 0 {
		scale = 1
	}
	if !o.Accumulate {
		clear(d.ran)
	}
	n := d.scatter(b)
	if d.sync != nil {
		d.sync.begin(n)
	}
	if o.BeforeBackward != nil {
		d.gate.begin(ctx, o.BeforeBackward, d.subs[:n], b.Size)
	}
	err := d.parallel(ctx, n, func(i int) error {
		// Each replica's mean-loss gradient is weighted by its share of the
		// batch, so the sum over replicas is the gradient of the whole
		// batch's mean loss.
		share := float64(d.subs[i].Size) / float64(b.Size)
		d.engs[i].Eng.SetRunKey(o.Key)
		if o.BeforeBackward != nil {
			// One call for the batch, replica 0 making it once every
			// replica has its loss; the others wait.
			d.engs[i].Eng.SetBeforeBackward(d.gate.pass[i])
		} else {
			d.engs[i].Eng.SetBeforeBackward(nil)
		}
		r, err := d.engs[i].Run(ctx, module.Train, &d.subs[i], d.ran[i], scale*share)
		d.results[i] = r
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	loss := 0.0
	for i := 0; i < n; i++ {
		d.ran[i] = true
		loss += rowShare(d.results[i].Loss, d.subs[i].Size, b.Size)
	}
	if o.Sync {
		d.reduceGrads()
	}
	return loss, d.combine(n), nil
}

// reduceGrads sums every replica's gradients into replica 0's in replica
// order; the buffer is cut into one span per replica, summed in parallel.
func (d *DP) reduceGrads() {
	st := d.engs[0].Eng.Store()
	np, n := st.NumParams(), len(d.engs)
	var wg sync.WaitGroup
	for s := 0; s < n; s++ {
		lo := collective.Offset(np, n, s)
		hi := lo + collective.BlockLen(np, n, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i < n; i++ {
				if !d.ran[i] {
					continue
				}
				src := d.engs[i].Eng.Store()
				if st.Dtype() == tensor.Float32 {
					collective.ReduceInto(st.Grad32()[lo:hi], src.Grad32()[lo:hi], collective.Sum)
				} else {
					collective.ReduceInto(st.Grad64()[lo:hi], src.Grad64()[lo:hi], collective.Sum)
				}
			}
		}()
	}
	wg.Wait()
}

// combine merges the replicas' logged values into one per name, as if one
// device had run the whole batch.
func (d *DP) combine(n int) []module.Metric {
	base := d.results[0].Metrics
	d.metrics = append(d.metrics[:0], base...)
	for k := range d.metrics {
		m := &d.metrics[k]
		if n == 1 {
			continue
		}
		if m.Derive != nil {
			// A count metric: the whole batch's counts are the replicas' sum.
			if len(d.counts) <= k {
				d.counts = append(d.counts, make([][]float64, k+1-len(d.counts))...)
			}
			c := append(d.counts[k][:0], m.Counts...)
			w := m.Weight
			for i := 1; i < n; i++ {
				v := d.results[i].Metrics[k]
				for j := range min(len(c), len(v.Counts)) {
					c[j] += v.Counts[j]
				}
				w += v.Weight
			}
			d.counts[k], m.Counts, m.Weight = c, c, w
			continue
		}
		sum, w := 0.0, 0.0
		for i := 0; i < n; i++ {
			v := d.results[i].Metrics[k]
			switch m.Spec.Reduce {
			case module.Max:
				m.Value = math.Max(m.Value, v.Value)
			case module.Min:
				m.Value = math.Min(m.Value, v.Value)
			case module.Sum:
				sum += v.Value
			default:
				sum += v.Value * v.Weight
			}
			w += v.Weight
		}
		m.Weight = w
		switch m.Spec.Reduce {
		case module.Sum:
			m.Value = sum
		case module.Mean:
			if w > 0 {
				m.Value = sum / w
			}
		}
	}
	return d.metrics
}

func (d *DP) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if d.engs == nil {
		return math.NaN(), errors.New("dp: OptimizerStep before Setup")
	}
	st := d.engs[0].Eng.Store()
	if err := replica.BeforeUpdate(o, st, 0, st.NumParams()); err != nil {
		return math.NaN(), err
	}
	norm := replica.ApplyStep(st, d.opt, o, 0, st.NumParams())
	err := d.parallel(ctx, len(d.engs), func(i int) error {
		if i == 0 {
			return nil
		}
		return d.engs[i].Eng.Store().CopyFrom(st)
	})
	return norm, err
}

func (d *DP) evalStep(ctx context.Context, mode module.Mode, b *data.Batch) ([]module.Metric, error) {
	n := d.scatter(b)
	err := d.parallel(ctx, n, func(i int) error {
		r, err := d.engs[i].Run(ctx, mode, &d.subs[i], false, 1)
		d.results[i] = r
		return err
	})
	if err != nil {
		return nil, err
	}
	return d.combine(n), nil
}

// predictStep runs the whole batch on replica 0: outputs need no reduction,
// and one graph keeps rows in order.
func (d *DP) predictStep(ctx context.Context, b *data.Batch) (*tensor.Dense, error) {
	var out *tensor.Dense
	err := d.devs[0].Do(ctx, func() error {
		r, err := d.engs[0].Run(ctx, module.Predict, b, false, 1)
		if err == nil && (r.Output == nil || r.Output.Dims() == 0) {
			err = strategy.ErrScalarPrediction
		}
		out = r.Output
		return err
	})
	return out, err
}

// Reduce has nothing to do: the replicas' values were combined per step.
func (d *DP) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	return ctx.Err()
}

func (d *DP) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if d.engs == nil {
		return nil, errors.New("dp: SaveState before Setup")
	}
	return strategy.SaveReplicaState(d.engs[0].Eng.Store(), d.opt, d.sched)
}

// LoadState loads sd into replica 0 and copies it to the others.
func (d *DP) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if d.engs == nil {
		return errors.New("dp: LoadState before Setup")
	}
	st := d.engs[0].Eng.Store()
	if err := strategy.LoadReplicaState(sd, st, d.opt, d.sched, 0, st.NumParams()); err != nil {
		return err
	}
	for _, r := range d.engs[1:] {
		if err := r.Eng.Store().CopyFrom(st); err != nil {
			return fmt.Errorf("copy the state to every replica: %w", err)
		}
	}
	return nil
}

// Teardown gives the cores the replicas shared back to the process.
func (d *DP) Teardown(ctx context.Context) error {
	if d.releaseCores != nil {
		d.releaseCores()
	}
	return nil
}

// Rebind runs m over the replicas' parameters from now on.
func (d *DP) Rebind(m module.Module) error {
	if d.engs == nil {
		return errors.New("dp: Rebind before Setup")
	}
	for _, r := range d.engs {
		r.Rebind(m)
	}
	return nil
}

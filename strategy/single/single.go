package single

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/optim"
	"github.com/fulgur-ml/fulgur/strategy"
	"github.com/fulgur-ml/fulgur/strategy/device/engine"
	"github.com/fulgur-ml/fulgur/strategy/replica"
)

var (
	_ strategy.Strategy = (*Single)(nil)
	_ strategy.Rebinder = (*Single)(nil)
	_ strategy.Replica  = (*Single)(nil)
)

// Single trains one replica in this process.
type Single struct {
	eng   *engine.Engine
	opt   optim.Optimizer
	sched optim.Scheduler
}

// NewSingle returns the one-replica strategy.
func NewSingle() *Single { return &Single{} }

func (s *Single) Info() strategy.Info {
	return strategy.Info{Name: "single", WorldSize: 1, GlobalZero: true}
}

func (s *Single) Setup(ctx context.Context, su strategy.Setup) error {
	store, err := module.NewStore(su.Specs, su.Dtype, su.Seed)
	if err != nil {
		return err
	}
	s.eng = engine.New(su.Module, store, su.Fields, su.Seed, engine.WithSettingName(su.SettingName))
	s.opt, s.sched, err = su.NewOptimizer()
	if err != nil {
		return err
	}
	return s.opt.Bind(0, store.NumParams())
}

// Rebind runs m over the trained parameters from now on.
func (s *Single) Rebind(m module.Module) error {
	if s.eng == nil {
		return errors.New("single: Rebind before Setup")
	}
	s.eng.Rebind(m)
	return nil
}

// Store is the replica's parameters, buffers and gradients; nil before
// Setup.
func (s *Single) Store() *module.Store {
	if s.eng == nil {
		return nil
	}
	return s.eng.Store()
}

func (s *Single) Step(ctx context.Context, mode module.Mode, b *data.Batch, o strategy.TrainOptions) (strategy.StepResult, error) {
	if s.eng == nil {
		return strategy.StepResult{}, errors.New("single: Step before Setup")
	}
	scale := 1.0
	if mode == module.Train {
		s.eng.SetRunKey(o.Key)
		s.eng.SetBeforeBackward(o.BeforeBackward)
		if o.Scale != 0 {
			scale = o.Scale
		}
	}
	r, err := s.eng.Run(ctx, mode, b, mode == module.Train && o.Accumulate, scale)
	if err == nil && mode == module.Predict && (r.Output == nil || r.Output.Dims() == 0) {
		err = strategy.ErrScalarPrediction
	}
	return strategy.StepResult{Loss: r.Loss, Metrics: r.Metrics, Output: r.Output}, err
}

func (s *Single) OptimizerStep(ctx context.Context, o strategy.OptimizerOptions) (float64, error) {
	if s.eng == nil {
		return math.NaN(), errors.New("single: OptimizerStep before Setup")
	}
	if err := replica.BeforeUpdate(o, s.eng.Store(), 0, s.eng.Store().NumParams()); err != nil {
		return math.NaN(), err
	}
	return replica.ApplyStep(s.eng.Store(), s.opt, o, 0, s.eng.Store().NumParams()), nil
}

func (s *Single) Reduce(ctx context.Context, sums, weights []float64, ops []module.Reduce) error {
	return ctx.Err()
}

func (s *Single) SaveState(ctx context.Context, o strategy.SaveOptions) (*strategy.StateDict, error) {
	if s.eng == nil {
		return nil, errors.New("single: SaveState before Setup")
	}
	return strategy.SaveReplicaState(s.eng.Store(), s.opt, s.sched)
}

func (s *Single) LoadState(ctx context.Context, sd *strategy.StateDict) error {
	if s.eng == nil {
		return errors.New("single: LoadState before Setup")
	}
	return strategy.LoadReplicaState(sd, s.eng.Store(), s.opt, s.sched, 0, s.eng.Store().NumParams())
}

func (s *Single) Teardown(ctx context.Context) error { return nil }

func init() {
	strategy.RegisterCheck("single", checkLayout)
	strategy.Register("single", func(o strategy.Options) (strategy.Strategy, error) {
		if err := checkLayout(o); err != nil {
			return nil, err
		}
		return NewSingle(), nil
	})
}

func checkLayout(o strategy.Options) error {
	if o.Devices > 1 || o.NumNodes > 1 {
		return fmt.Errorf("strategy \"single\" runs one device, but %s is %d and %s is %d: use a distributed strategy (\"ddp\", \"dp\", ...) or %[1]s 1", o.Name("Devices"), o.Devices, o.Name("NumNodes"), o.NumNodes)
	}
	return nil
}

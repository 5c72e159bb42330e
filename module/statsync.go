package module

import "context"

// StatSyncer sums float64 buffers element-wise, in place, across the
// replicas of a job: what SyncBatchNorm needs from a strategy. Every
// replica calls it with buffers of the same length in the same order.
// Strategies that run more than one replica give one to each replica's
// graphs; single-device runs have none.
type StatSyncer interface {
	AllReduceSum(ctx context.Context, buf []float64) error
	// Size is the number of replicas taking part.
	Size() int
}

// StatSync is a step's view of its job's StatSyncer, handed to layers
// through Step.StatSync. Gorgonia ops run without a context, so the engine
// sets the context (and gradient weight) of each run before running the
// graph, and ops reduce through AllReduceSum(buf).
type StatSync struct {
	syncer StatSyncer
	all    bool
	ctx    context.Context
	weight float64
}

// NewStatSync wraps s for the steps of one replica; all makes every
// BatchNorm synchronise its statistics (Lightning's sync_batchnorm=True),
// otherwise only those built with nn.BatchNormSync. It returns nil when s
// is nil: no replica to sync with.
func NewStatSync(s StatSyncer, all bool) *StatSync {
	if s == nil {
		return nil
	}
	return &StatSync{syncer: s, all: all, ctx: context.Background(), weight: 1}
}

// All reports whether every BatchNorm synchronises.
func (s *StatSync) All() bool { return s != nil && s.all }

// Size is the number of replicas taking part (1 for a nil StatSync).
func (s *StatSync) Size() int {
	if s == nil {
		return 1
	}
	return s.syncer.Size()
}

// SetRun describes the graph run about to start: its context, and the
// weight its gradients get before the strategy sums them across replicas
// (the engine's gradient scale: DP weighs replicas by their share of the
// batch). The engine calls it before each run of a graph built with s.
func (s *StatSync) SetRun(ctx context.Context, gradWeight float64) { s.ctx, s.weight = ctx, gradWeight }

// GradWeight is the current run's gradient weight (ops.GradWeighter).
func (s *StatSync) GradWeight() float64 { return s.weight }

// AllReduceSum sums buf across the replicas under the current run's
// context (ops.StatReducer).
func (s *StatSync) AllReduceSum(buf []float64) error { return s.syncer.AllReduceSum(s.ctx, buf) }

package trainer_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// evenSampler visits the even indices, three times each: a sampler of the
// user's own (a class-balanced or weighted one), the same on every rank.
type evenSampler struct{}

func (evenSampler) Order(epoch, n int) ([]int, []bool) {
	var idx []int
	for range 3 {
		for i := 0; i < n; i += 2 {
			idx = append(idx, i)
		}
	}
	return idx, nil
}

// seenIndices records the dataset indices of the batches it trains on.
type seenIndices struct {
	*linreg
	mu   *sync.Mutex
	seen *[]int
}

func (m seenIndices) OnTrainBatchStart(ctx context.Context, b *data.Batch, idx int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	*m.seen = append(*m.seen, b.Indices...)
	return nil
}

// Under a multi-process strategy the trainer inserts a distributed sampler;
// a loader's own sampler is sharded by it, as Lightning's
// DistributedSamplerWrapper does: the ranks together visit what the
// sampler gives, once (it was replaced, silently, by a shard of every
// example: the job trained on the odd indices the sampler leaves out, and
// on each even one once instead of three times).
func TestDistributedSamplerShardsTheLoadersSampler(t *testing.T) {
	ds := regression(t, 32, 0, 1)
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4, Sampler: evenSampler{}})
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := 0; i < 32; i += 2 {
		want = append(want, i, i, i)
	}
	var mu sync.Mutex
	seen := make([][]int, 2)
	_, errs := onRanks(t, 2, ddpRank(t), func(r int) trainer.Config {
		return quiet(trainer.Config{MaxEpochs: 1})
	}, func(r int, tr *trainer.Trainer) error {
		return tr.Fit(context.Background(), seenIndices{&linreg{in: 4, lr: 0.01}, &mu, &seen[r]}, l, nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	all := slices.Concat(seen[0], seen[1])
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Errorf("the ranks trained on %v\nwant the sampler's %v", all, want)
	}
	if len(seen[0]) != len(seen[1]) {
		t.Errorf("rank 0 trained on %d examples, rank 1 on %d: want equal shards", len(seen[0]), len(seen[1]))
	}
}

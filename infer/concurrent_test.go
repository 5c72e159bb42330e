package infer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
	"github.com/fulgur-ml/fulgur/module"
)

// An HTTP handler calls Predict from a goroutine per request: calls at
// once, with batches of several sizes (graphs built on the way), predict
// what the same calls made one after another do, bit for bit.
func TestPredictFromManyGoroutines(t *testing.T) {
	for _, a := range archs {
		t.Run(a.name, func(t *testing.T) {
			m, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, Seed: 6})
			if err != nil {
				t.Fatal(err)
			}
			const workers, calls = 8, 10
			batch := func(w, c int) []float32 { return randomX(uint64(100*w+c), 1+(w+c)%3) }
			ref, err := infer.New(a.new(), infer.Config{Inputs: []data.Field{xField}, InitialWeights: true, Seed: 6})
			if err != nil {
				t.Fatal(err)
			}
			want := make([][][]float64, workers)
			for w := range want {
				for c := 0; c < calls; c++ {
					want[w] = append(want[w], predict(t, ref, batch(w, c)))
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := 0; w < workers; w++ {
				wg.Go(func() {
					for c := 0; c < calls; c++ {
						x := batch(w, c)
						b, err := m.Batch(len(x)/16, x)
						if err != nil {
							errs[w] = err
							return
						}
						out, err := m.Predict(context.Background(), b)
						if err != nil {
							errs[w] = err
							return
						}
						if got := values(out); !sameValues(got, want[w][c]) {
							errs[w] = fmt.Errorf("call %d: predicted %v, alone it predicts %v", c, got[:3], want[w][c][:3])
							return
						}
					}
				})
			}
			wg.Wait()
			for w, err := range errs {
				if err != nil {
					t.Errorf("goroutine %d: %v", w, err)
				}
			}
		})
	}
}

// blockingMLP's PredictStep (run when the first batch of a size builds its
// graph) waits for release: it holds a Predict call mid-run.
type blockingMLP struct {
	tinyMLP
	entered, release chan struct{}
}

func (m *blockingMLP) PredictStep(s *module.Step) (*G.Node, error) {
	if s.BatchSize() == 2 {
		close(m.entered)
		<-m.release
	}
	return m.tinyMLP.PredictStep(s)
}

// A call whose context ends while it waits for another call ends then,
// with an error saying so; a call with a done context runs nothing.
func TestPredictContextEndsWhileWaiting(t *testing.T) {
	bm := &blockingMLP{entered: make(chan struct{}), release: make(chan struct{})}
	m, err := infer.New(bm, infer.Config{Inputs: []data.Field{xField}, InitialWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := m.Batch(2, randomX(1, 2))
	b1, _ := m.Batch(1, randomX(2, 1))
	first := make(chan error, 1)
	go func() {
		_, err := m.Predict(context.Background(), b2)
		first <- err
	}()
	<-bm.entered
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := m.Predict(ctx, b1)
		second <- err
	}()
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was predicted") {
			t.Errorf("a call cancelled while another runs: %v, want context.Canceled saying nothing was predicted", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("a call whose context ended still waits for the call before it")
	}
	close(bm.release)
	if err := <-first; err != nil {
		t.Fatalf("the running call: %v", err)
	}
	if _, err := m.Predict(ctx, b1); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "the context is done") {
		t.Errorf("Predict with a cancelled context: %v", err)
	}
}

package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/trainer"
)

// fileLogger is a Logger of one's own that "closes its file" in Finalize
// and opens it again when more comes, as it must: Finalize ends each Fit,
// Validate and Test, and a Test after a Fit logs into the Fit's loggers.
type fileLogger struct{ open bool }

func (*fileLogger) Name() string                        { return "fileLogger" }
func (*fileLogger) LogHyperparams(map[string]any) error { return nil }
func (l *fileLogger) LogMetrics(step int, m map[string]float64) error {
	if !l.open {
		fmt.Println("open the file")
		l.open = true
	}
	fmt.Println("step", step, slices.Sorted(maps.Keys(m)))
	return nil
}
func (l *fileLogger) Finalize(status string) error {
	if !l.open {
		return errors.New("finalized twice without a row between")
	}
	fmt.Println("close the file:", status)
	l.open = false
	return nil
}

func ExampleLogger() {
	x := []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}
	y := []float32{0.5, -1.5, 2, 0.25}
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{4}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		panic(err)
	}
	l, _ := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2})
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, LogEveryNSteps: 1, DisableCheckpointing: true, Out: io.Discard,
		EnableProgressBar: trainer.Bool(false), Loggers: []trainer.Logger{&fileLogger{}}})
	if err != nil {
		panic(err)
	}
	m := newEvalReg()
	if err := tr.Fit(context.Background(), m, l, nil); err != nil {
		panic(err)
	}
	if _, err := tr.Test(context.Background(), m, l); err != nil {
		panic(err)
	}
	// Output:
	// open the file
	// step 1 [epoch lr train_loss_step]
	// step 2 [epoch lr train_loss_step]
	// step 2 [epoch train_loss_epoch]
	// close the file: success
	// open the file
	// step 2 [epoch test_loss]
	// close the file: success
}

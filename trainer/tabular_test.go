package trainer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn"
	"github.com/fulgur-ml/fulgur/trainer"
)

// TabularMLP is a regression MLP over a table's features, with its own
// metric (the mean absolute error) beside the loss.
type TabularMLP struct {
	In, Hidden int
	fc1, fc2   *nn.Linear
}

func (m *TabularMLP) HParams() map[string]any {
	return map[string]any{"in": m.In, "hidden": m.Hidden}
}

func (m *TabularMLP) Configure(b *module.Builder) error {
	m.fc1 = nn.NewLinear(b, "fc1", m.In, m.Hidden, nn.LinearReLU())
	m.fc2 = nn.NewLinear(b, "fc2", m.Hidden, 1)
	return nil
}

func (m *TabularMLP) forward(s *module.Step) *G.Node {
	return m.fc2.Forward(s, m.fc1.Forward(s, s.Input("x"))) // [batch, 1]
}

func (m *TabularMLP) TrainingStep(s *module.Step) (*G.Node, error) {
	out := m.forward(s)
	loss := nn.MSELoss(out, s.Input("y"))
	s.Log("train_loss", loss, module.ProgBar())
	s.Log("train_mae", nn.L1Loss(out, s.Input("y")), module.OnStep(true), module.OnEpoch(true))
	return loss, nil
}

func (m *TabularMLP) ValidationStep(s *module.Step) error {
	out := m.forward(s)
	s.Log("val_loss", nn.MSELoss(out, s.Input("y")))
	s.Log("val_mae", nn.L1Loss(out, s.Input("y")))
	return nil
}

// tableCSV is a file such as a newcomer brings: 3 features on their own
// scales and a noisy target.
func tableCSV(rows int) string {
	var b strings.Builder
	b.WriteString("age,income,score,target\n")
	for i := range rows {
		u := float64(i*7919%rows) / float64(rows) // a fixed scatter in [0, 1)
		v := float64(i*104729%rows) / float64(rows)
		age, income, score := 20+50*u, 20000+80000*v, math.Sin(float64(i))
		target := 2*u - v + 0.5*score + 0.01*math.Cos(float64(3*i))
		fmt.Fprintf(&b, "%s,%s,%s,%s\n", strconv.FormatFloat(age, 'f', 3, 64), strconv.FormatFloat(income, 'f', 0, 64),
			strconv.FormatFloat(score, 'f', 5, 64), strconv.FormatFloat(target, 'f', 5, 64))
	}
	return b.String()
}

// A newcomer's own problem end to end: a CSV table read with data.ReadCSV
// (data.OpenCSV for a file), split 80/20 with data.RandomSplit, the features
// standardised with the training part's statistics, an MLP of their own
// with EarlyStopping and ModelCheckpoint on the validation MAE, then the
// best checkpoint validated again.
func Example_tabularCSV() {
	ds, err := data.ReadCSV(strings.NewReader(tableCSV(2000)), data.CSVConfig{Fields: []data.CSVField{
		{Name: "x"}, // age, income, score: every column "y" does not take
		{Name: "y", Columns: []string{"target"}, Shape: []int{1}},
	}})
	if err != nil {
		panic(err)
	}
	parts, err := data.RandomSplit(ds, 1, 0.8, 0.2)
	if err != nil {
		panic(err)
	}
	mean, std, err := data.MeanStd(parts[0], "x")
	if err != nil {
		panic(err)
	}
	trainSet, err := data.Normalize(parts[0], "x", mean, std)
	if err != nil {
		panic(err)
	}
	valSet, err := data.Normalize(parts[1], "x", mean, std)
	if err != nil {
		panic(err)
	}
	train, err := data.NewLoader(trainSet, data.LoaderConfig{BatchSize: 64, Shuffle: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	val, err := data.NewLoader(valSet, data.LoaderConfig{BatchSize: 256})
	if err != nil {
		panic(err)
	}

	early, err := callbacks.NewEarlyStopping(callbacks.EarlyStoppingConfig{Monitor: "val_mae", Mode: "min", Patience: 3})
	if err != nil {
		panic(err)
	}
	best, err := callbacks.NewModelCheckpoint(callbacks.ModelCheckpointConfig{Monitor: "val_mae", Mode: "min"})
	if err != nil {
		panic(err)
	}
	root, err := os.MkdirTemp("", "fulgur-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	tr, err := trainer.New(trainer.Config{MaxEpochs: 30, Seed: 1, Out: io.Discard, DefaultRootDir: root,
		GradientClipVal: 1, Callbacks: []trainer.Callback{early, best}})
	if err != nil {
		panic(err)
	}
	m := &TabularMLP{In: 3, Hidden: 32}
	if err := tr.Fit(context.Background(), m, train, val); err != nil {
		panic(err)
	}
	res, err := tr.Validate(context.Background(), m, val, trainer.WithCheckpoint("best"))
	if err != nil {
		panic(err)
	}
	fmt.Println("features:", ds.Fields()[0].Shape[0], "train/val:", parts[0].Len(), parts[1].Len())
	fmt.Println("best checkpoint's val_mae below 0.05:", res["val_mae"] < 0.05)
	fmt.Println("it is the best ModelCheckpoint saw:", math.Abs(res["val_mae"]-best.BestModelScore()) < 1e-6)
	// Output:
	// features: 3 train/val: 1600 400
	// best checkpoint's val_mae below 0.05: true
	// it is the best ModelCheckpoint saw: true
}

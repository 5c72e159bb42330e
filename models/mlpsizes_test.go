package models_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/trainer"
)

// -sizes whose first width is not the data's (100,10 on 28x28 images) was
// a panic in Gorgonia's Reshape ("shape size doesn't not match. Expected
// 200704, got 25600") with its stack; it is an error naming the field, the
// flag, both widths and the fix.
func TestMLPSizesThatDoNotFitTheInput(t *testing.T) {
	const n = 8
	x := make([]float32, n*28*28)
	y := make([]float32, n)
	ds, err := data.NewInMemory([]data.Field{{Name: "x", Shape: []int{1, 28, 28}}, {Name: "y"}}, [][]float32{x, y})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxSteps: 1, Out: io.Discard, EnableProgressBar: trainer.Bool(false),
		DisableCheckpointing: true, DisableLogger: true})
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Fit(context.Background(), &models.MLP{Sizes: []int{100, 32, 10}}, l, l)
	if err == nil {
		t.Fatal("trained")
	}
	for _, want := range []string{"MLP.Sizes (-sizes) is [100 32 10]", "holds 784 values", "such as 784,32,10"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "panicked") {
		t.Errorf("a panic, not an error: %v", err)
	}
}

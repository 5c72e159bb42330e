package callbacks_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/callbacks"
	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/models"
	"github.com/fulgur-ml/fulgur/trainer"
)

// The row a Validate or Test logs is marked in metrics.csv and
// metrics.jsonl (trainer.EvaluationColumn, 1), and only that row: a
// reader tells it from an epoch's rows without guessing by position.
func TestLoggersMarkEvaluationRows(t *testing.T) {
	train, test, _, err := data.OpenFashionMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	trainL, err := data.NewLoader(train, data.LoaderConfig{BatchSize: 64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	testL, err := data.NewLoader(test, data.LoaderConfig{BatchSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	csvLog, err := callbacks.NewCSVLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	jsonLog, err := callbacks.NewJSONLLogger(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trainer.New(trainer.Config{MaxEpochs: 1, LimitTrainBatches: 2, LimitValBatches: 1, LimitTestBatches: 1, LogEveryNSteps: 1, Seed: 1,
		DefaultRootDir: dir, Loggers: []trainer.Logger{csvLog, jsonLog}, Out: io.Discard,
		EnableProgressBar: trainer.Bool(false), DisableCheckpointing: true, HandleSignals: trainer.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &models.MLP{}
	if err := tr.Fit(ctx, m, trainL, testL); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Validate(ctx, m, testL); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Test(ctx, m, testL); err != nil {
		t.Fatal(err)
	}
	tr.Teardown(ctx)

	f, err := os.Open(filepath.Join(dir, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, c := range recs[0] {
		if c == trainer.EvaluationColumn {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("metrics.csv header %v has no %q column", recs[0], trainer.EvaluationColumn)
	}
	var csvMarks []string
	for _, r := range recs[1:] {
		csvMarks = append(csvMarks, r[col])
	}
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var jsonMarks []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", line, err)
		}
		v, ok := row[trainer.EvaluationColumn]
		switch {
		case !ok:
			jsonMarks = append(jsonMarks, "")
		case v == 1.0:
			jsonMarks = append(jsonMarks, "1")
		default:
			t.Errorf("metrics.jsonl line %q: %q is %v, want 1", line, trainer.EvaluationColumn, v)
		}
	}
	// Two steps, the epoch's row and its validation's, then the Validate's
	// and the Test's.
	want := []string{"", "", "", "", "1", "1"}
	if strings.Join(csvMarks, "|") != strings.Join(want, "|") {
		t.Errorf("metrics.csv marks %q, want %q (%v)", csvMarks, want, recs)
	}
	if strings.Join(jsonMarks, "|") != strings.Join(want, "|") {
		t.Errorf("metrics.jsonl marks %q, want %q (%s)", jsonMarks, want, b)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/models"
	"github.com/fulgur-ml/fulgur/module"
)

func runMLP(t *testing.T, args ...string) Summary {
	t.Helper()
	var out bytes.Buffer
	j := ImageJob{
		Program:   "mlp",
		NewModule: func(f *Flags) module.Module { return &models.MLP{LR: f.LR} },
		Defaults:  Flags{MaxEpochs: 1, BatchSize: 64, LR: 1e-3, RootDir: t.TempDir()},
		Stdout:    &out,
	}
	if err := j.Run(context.Background(), append([]string{"-no-progress-bar"}, args...)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var s Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line %q is not the JSON summary: %v", lines[len(lines)-1], err)
	}
	return s
}

func TestImageJobSummary(t *testing.T) {
	s := runMLP(t, "-max-steps", "30", "-limit-test-batches", "4", "-seed", "3", "-deterministic")
	if s.GlobalStep != 30 || s.Epochs != 1 || s.WorldSize != 1 || len(s.WeightsSHA256) != 64 {
		t.Fatalf("summary = %+v", s)
	}
	// 30 Adam steps on Fashion-MNIST get well past chance (0.1).
	if s.TestAcc < 0.4 || s.TestLoss <= 0 || s.TrainSamplesPerS <= 0 {
		t.Fatalf("summary = %+v: want test_acc > 0.4 after 30 steps", s)
	}
	again := runMLP(t, "-max-steps", "30", "-limit-test-batches", "4", "-seed", "3", "-deterministic")
	if again.WeightsSHA256 != s.WeightsSHA256 {
		t.Fatalf("same seed, different weights: %s vs %s", s.WeightsSHA256, again.WeightsSHA256)
	}
	other := runMLP(t, "-max-steps", "30", "-limit-test-batches", "4", "-seed", "4", "-deterministic")
	if other.WeightsSHA256 == s.WeightsSHA256 {
		t.Fatal("a different seed gave the same weights")
	}
}

func TestImageJobBadFlags(t *testing.T) {
	j := ImageJob{Program: "mlp", NewModule: func(f *Flags) module.Module { return &models.MLP{} },
		Defaults: Flags{MaxEpochs: 1, BatchSize: 64, LR: 1e-3}}
	err := j.Run(context.Background(), []string{"-batch-size", "0", "-lr", "-1"})
	if err == nil || !strings.Contains(err.Error(), "-batch-size is 0: use 1 or more") || !strings.Contains(err.Error(), "-lr is -1") {
		t.Fatalf("err = %v, want both bad flags named", err)
	}
	err = j.Run(context.Background(), []string{"-data", "/nonexistent/fashion"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/fashion is not a directory") {
		t.Fatalf("err = %v", err)
	}
	err = j.Run(context.Background(), []string{"-strategy", "warp"})
	if err == nil || !strings.Contains(err.Error(), `Strategy is "warp"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestImageJobFastDevRunBare(t *testing.T) {
	s := runMLP(t, "-fast-dev-run")
	if s.GlobalStep != 1 || s.Epochs != 1 {
		t.Fatalf("summary = %+v, want 1 step in 1 epoch", s)
	}
	s = runMLP(t, "-fast-dev-run", "3")
	if s.GlobalStep != 3 {
		t.Fatalf("summary = %+v, want 3 steps", s)
	}
}

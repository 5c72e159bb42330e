package cli_test

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestFitSummary(t *testing.T) {
	s := runMLP(t, "-max-steps", "30", "-limit-test-batches", "4", "-seed", "3", "-deterministic")
	if s.Command != "fit" || s.GlobalStep != 30 || s.Epochs != 1 || s.WorldSize != 1 || len(s.WeightsSHA256) != 64 {
		t.Fatalf("summary = %+v", s)
	}
	// 30 Adam steps on Fashion-MNIST get well past chance (0.1).
	if !(num(s.TestAcc) >= 0.4) || !(num(s.TestLoss) > 0) || s.TrainSamplesPerS <= 0 {
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

func TestBadFlagsNameFlagValueAndFix(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-batch-size", "0", "-lr", "-1"}, []string{"-batch-size is 0: use a value >= 1", "-lr is -1: use a value > 0"}},
		{[]string{"-max-steps", "ten"}, []string{`invalid value "ten" for flag -max-steps: use a whole number`, "mlp -h"}},
		{[]string{"-precision", "16"}, []string{`-precision is "16": use one of 32, 64`}},
		// Lightning refuses devices=0 too; the trainer's zero value means 1.
		{[]string{"-devices", "0"}, []string{"-devices is 0: use 1 or more, or -1 for all"}},
		{[]string{"-data", "/nonexistent/fashion"}, []string{"/nonexistent/fashion is not a directory"}},
		{[]string{"-strategy", "warp"}, []string{`-strategy is "warp"`}},
		{[]string{"-accelerator", "tpu"}, []string{`-accelerator is "tpu": use "cpu", "cuda" or "auto"`}},
		{[]string{"-profiler", "gprof"}, []string{`-profiler is "gprof": use one of advanced, simple, timeline, or none`}},
		{[]string{"fitt"}, []string{`unknown command "fitt": use fit, validate, test, predict`}},
		{[]string{"-max-steps", "3", "extra"}, []string{`unexpected arguments ["extra"]`, "the command comes first"}},
		{[]string{"-nope"}, []string{"unknown flag -nope (see mlp -h)"}},
		// The model's own Validate, called after parsing.
		{[]string{"-sizes", "784,0,10"}, []string{"MLP.Sizes (-sizes) is [784 0 10]: give the input width and at least one layer, each 1 or more"}},
	} {
		// A fresh App each time: Run parses into the App's model and data.
		err := mlpApp(t.TempDir()).Run(context.Background(), c.args)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v, want %q", c.args, err, w)
			}
		}
	}
}

func TestFastDevRunBare(t *testing.T) {
	s := runMLP(t, "-fast-dev-run")
	if s.GlobalStep != 1 || s.Epochs != 1 {
		t.Fatalf("summary = %+v, want 1 step in 1 epoch", s)
	}
	s = runMLP(t, "-fast-dev-run", "3")
	if s.GlobalStep != 3 {
		t.Fatalf("summary = %+v, want 3 steps", s)
	}
}

// lr-find runs the range test on the training data, prints the suggested
// rate and the curve, and leaves no run directory behind.
func TestLRFindCommand(t *testing.T) {
	root := t.TempDir()
	s, stderr := run(t, mlpApp(root), "lr-find", "-no-progress-bar")
	f := s.LRFind
	if s.Command != "lr-find" || f == nil {
		t.Fatalf("summary %+v", s)
	}
	if len(f.LRs) != len(f.Losses) || len(f.LRs) < 20 || len(f.LRs) > 100 || f.LRs[0] != 1e-8 {
		t.Fatalf("%d rates from %v, %d losses: want 20 to 100 of each from 1e-8", len(f.LRs), f.LRs[:1], len(f.Losses))
	}
	if !(f.Suggestion > 1e-8 && f.Suggestion < 1) || !strings.Contains(stderr, "lr-find: the loss fell fastest at learning rate") {
		t.Errorf("suggestion %g; stderr:\n%s", f.Suggestion, stderr)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Errorf("lr-find wrote into the root directory: %v %v", entries, err)
	}
}

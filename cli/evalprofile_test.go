package cli_test

import (
	"strings"
	"testing"
)

// `test` and `validate` with -profiler simple print the profiler's table
// as `fit` does (before, they printed none: only Fit reported), and the
// summary stays the last line of stdout.
func TestEvaluationCommandsPrintTheProfile(t *testing.T) {
	root := t.TempDir()
	run(t, mlpApp(root), "fit", "-max-steps", "3", "-limit-val-batches", "1", "-limit-test-batches", "1", "-no-progress-bar")
	for _, c := range []struct{ command, step string }{{"test", "test step"}, {"validate", "validate step"}} {
		s, stderr := run(t, mlpApp(root), c.command, "-ckpt-path", "last", "-limit-test-batches", "2", "-limit-val-batches", "2", "-profiler", "simple", "-no-progress-bar")
		if s.Command != c.command {
			t.Errorf("%s: summary %+v", c.command, s)
		}
		if !strings.Contains(stderr, "ACTION") || !strings.Contains(stderr, c.step) {
			t.Errorf("%s -profiler simple printed no profile with a %q row:\n%s", c.command, c.step, stderr)
		}
	}
}

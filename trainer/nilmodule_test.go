package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/trainer"
)

// A constructor that failed returns a nil *T; passed on unchecked, its
// Configure dereferences it. Fit says so, naming the type and the fix, as
// infer.New does: the panic alone ("invalid memory address") does not say
// which value was nil.
func TestFitWithNilPointerModuleNamesIt(t *testing.T) {
	tr, err := trainer.New(quiet(trainer.Config{MaxEpochs: 1, DefaultRootDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	var m *linreg
	err = tr.Fit(context.Background(), m, loader(t, regression(t, 16, 0.01, 1), 8, false, false), nil)
	if err == nil {
		t.Fatal("Fit(nil *linreg) succeeded")
	}
	for _, w := range []string{"Configure", "nil *trainer_test.linreg", "constructor returned an error"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

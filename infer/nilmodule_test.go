package infer_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/data"
	"github.com/fulgur-ml/fulgur/infer"
)

// A constructor that failed returns a nil *T; passed on unchecked, its
// Configure dereferences it. New must say so, as trainer.Fit does, not
// panic in the caller's program.
func TestNewWithNilPointerModuleIsAnError(t *testing.T) {
	var m *tinyMLP
	_, err := infer.New(m, infer.Config{Inputs: []data.Field{{Name: "x", Shape: []int{16}}}, InitialWeights: true})
	if err == nil {
		t.Fatal("infer.New(nil *tinyMLP) succeeded")
	}
	for _, w := range []string{"infer.New", "Configure", "nil *infer_test.tinyMLP"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

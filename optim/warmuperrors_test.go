package optim_test

import (
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/optim"
)

// TestLinearWarmupErrorsNameAFixThatExists: a module's
// ConfigureOptimizers returns one scheduler, so "give the trainer two
// schedulers" cannot be done; the errors of a warm-up that cannot hand
// over name what can (an interval both share, one of the two schedulers).
func TestLinearWarmupErrorsNameAFixThatExists(t *testing.T) {
	plateau, err := optim.NewReduceOnPlateau(optim.PlateauConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cos, err := optim.NewCosineAnnealing(0.1, 10, 0, optim.Every(optim.PerEpoch))
	if err != nil {
		t.Fatal(err)
	}
	_, errInterval := optim.NewLinearWarmup(0.1, 5, cos, optim.Every(optim.PerStep))
	_, errPlateau := optim.NewLinearWarmup(0.1, 5, plateau)
	for _, c := range []struct {
		err  error
		want string
	}{
		{errInterval, "optim.Every"},
		{errPlateau, "one scheduler"},
	} {
		if c.err == nil {
			t.Fatalf("no error (want one saying %q)", c.want)
		}
		if msg := c.err.Error(); strings.Contains(msg, "give the trainer") || !strings.Contains(msg, c.want) {
			t.Errorf("error %q: want no 'give the trainer' and %q", msg, c.want)
		}
	}
}

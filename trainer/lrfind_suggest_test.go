package trainer

import (
	"math"
	"testing"
)

// TestSuggestLRIgnoresTheCurveAfterItsLowest: the curve of an MLP with
// Adam on Fashion-MNIST (smoothed losses, rates 1e-8 to 1) falls fastest
// between rates 0.0015 and 0.0066, is lowest at 0.061, jumps to 5.2 and
// then falls again, faster than before, as the average forgets the peak.
// Lightning's rule (the steepest descent anywhere) suggested 0.57 on it;
// the suggestion comes from before the lowest point.
func TestSuggestLRIgnoresTheCurveAfterItsLowest(t *testing.T) {
	lrs := make([]float64, 100)
	for i := range lrs {
		lrs[i] = 1e-8 * math.Pow(1e8, float64(i)/99)
	}
	// Every fourth step of the run, then its last 14.
	coarse := []float64{2.3099, 2.3042, 2.3029, 2.3044, 2.3041, 2.3036, 2.3027, 2.3029, 2.3018, 2.3015, 2.3017,
		2.3009, 2.2987, 2.2941, 2.2857, 2.2666, 2.2218, 2.1305, 2.0632, 1.9856, 1.9259, 1.8512}
	tail := []float64{1.9124, 2.1181, 2.7106, 3.1535, 3.7083, 4.4100, 4.6875, 4.6307, 5.2030, 5.1413, 5.0772, 5.0153, 4.9573, 4.8986}
	losses := make([]float64, 0, 100)
	for i := range 85 {
		j := i / 4
		f := float64(i%4) / 4
		if j+1 < len(coarse) {
			losses = append(losses, coarse[j]+f*(coarse[j+1]-coarse[j]))
		} else {
			losses = append(losses, coarse[j])
		}
	}
	losses = append(losses, 1.86)
	losses = append(losses, tail...)
	if len(losses) != 100 {
		t.Fatalf("built %d points", len(losses))
	}
	got := suggestLR(lrs, losses)
	if !(got > 1e-3 && got < 1e-2) {
		t.Errorf("suggestion %.3g, want the steepest descent before the lowest loss, between 1e-3 and 1e-2", got)
	}
	// Too few finite points: no suggestion.
	if got := suggestLR(lrs[:12], losses[:12]); got != 0 {
		t.Errorf("12 points (1 left after the first 10 and the last): suggestion %g, want 0", got)
	}
	nan := append([]float64(nil), losses...)
	for i := 70; i < 100; i++ {
		nan[i] = math.NaN()
	}
	if got := suggestLR(lrs, nan); !(got >= lrs[60] && got < lrs[70]) {
		t.Errorf("finite losses up to step 69 only: suggestion %.3g, want a rate of the descent before it (%.3g to %.3g)", got, lrs[60], lrs[69])
	}
}

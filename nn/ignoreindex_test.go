package nn_test

import (
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/nn"
)

// PyTorch's cross_entropy with ignore_index and with class weights, in
// CrossEntropyWeighted's row weights, as its comment says: weight 0 where
// the label is ignore_index (which may stay -100: a row of weight 0 is not
// checked; it used to be an error), and w_c of each row's class. Reference
// (torch 1.13, float64):
//
//	z = torch.tensor([[1., 2, 3, 4], [4, 3, 2, 1], [0, 0, 1, 0]], dtype=torch.float64, requires_grad=True)
//	F.cross_entropy(z, torch.tensor([0, -100, 2]), ignore_index=-100)
//	F.cross_entropy(z, torch.tensor([3, 0, 1]), weight=torch.tensor([2.0, 0.5, 7.0, 1.5], dtype=torch.float64))
//
// printing the loss and z.grad after backward().
func TestCrossEntropyWeightedIsIgnoreIndexAndClassWeights(t *testing.T) {
	for _, c := range []struct {
		name            string
		labels, weights []float64
		loss            float64
		grad            []float64
	}{
		{"ignore_index=-100", []float64{0, -100, 2}, []float64{1, 0, 1}, 2.091929039594937,
			[]float64{-0.4839706983599575, 0.043572159371016286, 0.11844140904495508, 0.3219571299439862, 0, 0, 0, 0, 0.08743885226355472, 0.08743885226355472, -0.2623165567906641, 0.08743885226355472}},
		{"class weights", []float64{3, 0, 1}, []float64{1.5, 2.0, 0.5}, 0.6031245338196308,
			[]float64{0.01202197623003187, 0.03267911952826222, 0.0888310567837163, -0.13353215254201037, -0.17804287005601382, 0.11844140904495508, 0.043572159371016286, 0.016029301640042494, 0.02185971306588868, -0.10314028693411131, 0.05942086080233396, 0.02185971306588868}},
	} {
		for _, dt := range dtypes {
			g := G.NewGraph()
			node := func(name string, v []float64, shape ...int) *G.Node {
				d := tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
				set(d, func(i int) float64 { return v[i] })
				return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(d))
			}
			z := node("z", []float64{1, 2, 3, 4, 4, 3, 2, 1, 0, 0, 1, 0}, 3, 4)
			loss := nn.CrossEntropyWeighted(z, node("labels", c.labels, 3), node("weights", c.weights, 3))
			acc := nn.AccuracyWeighted(z, node("labels2", c.labels, 3), node("weights2", c.weights, 3))
			gradAndRun(t, c.name+" "+dt.String(), g, loss, z)
			tol := 1e-15
			if dt == tensor.Float32 {
				tol = 1e-6
			}
			closeTo(t, c.name+" loss", vals(loss.Value()), []float64{c.loss}, tol)
			gz, _ := z.Grad()
			closeTo(t, c.name+" gradient", vals(gz), c.grad, tol)
			if c.name == "ignore_index=-100" { // row 0's largest logit is class 3, row 2's is class 2
				closeTo(t, c.name+" accuracy", vals(acc.Value()), []float64{0.5}, 0)
			}
		}
	}
}

package nn

import (
	"errors"
	"fmt"
	"hash/fnv"

	"strconv"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
)

// layerError is the panic value of a Forward that cannot build: it names the
// layer type and its full name.
func layerError(typ, name string, format string, args ...any) error {
	return fmt.Errorf("nn.%s %q: %s", typ, name, fmt.Sprintf(format, args...))
}

// must returns a function that passes a node through, or panics with the
// error wrapped in the layer's name: must(typ, name)(ops.X(...)).
func must(typ, name string) func(*G.Node, error) *G.Node {
	return func(n *G.Node, err error) *G.Node {
		if err != nil {
			panic(fmt.Errorf("nn.%s %q: %w", typ, name, err))
		}
		return n
	}
}

// checkInput panics unless x has dims dimensions and, where want is not -1,
// the given sizes; form describes the expected shape in words.
func checkInput(typ, name string, x *G.Node, form string, want ...int) {
	if x == nil {
		panic(layerError(typ, name, "input is nil"))
	}
	s := x.Shape()
	ok := len(s) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = want[i] < 0 || want[i] == s[i]
	}
	if !ok {
		panic(layerError(typ, name, "input has shape %v, want %s", s, form))
	}
}

// checkChannels panics, saying what to change, unless shape is [batch, in,
// height, width]; fix is a format taking the input's channel count (as in
// "set Conv2dConfig.In to %[1]d").
func checkChannels(typ, name string, shape []int, in int, fix string) {
	want := fmt.Sprintf("input has shape %v, want [batch, %d, height, width]", tensor.Shape(shape), in)
	switch {
	case len(shape) == 4 && shape[1] == in:
		return
	case len(shape) == 4:
		panic(layerError(typ, name, "%s: the layer was made for %d channels but the input has %d: %s, or fix the layer that feeds it", want, in, shape[1], fmt.Sprintf(fix, shape[1])))
	case len(shape) == 3 && shape[0] == in:
		panic(layerError(typ, name, "%s: give one image a batch axis, [1, %d, %d, %d]", want, in, shape[1], shape[2]))
	case len(shape) == 2:
		panic(layerError(typ, name, "%s: reshape rows of flat pixels to [batch, channels, height, width] first (G.Reshape), or declare the batch field with that shape", want))
	}
}

// needsGrad reports whether the gradient with respect to x can matter to
// training: whether x depends on a learnable parameter of the step. A layer
// fed from the batch alone (directly, or through a reshape) skips its input
// gradient: one matrix multiply per step that nobody reads.
func needsGrad(s *module.Step, x *G.Node) bool {
	params := map[*G.Node]bool{}
	for _, name := range s.UsedParams() {
		if n, ok := s.Node(name); ok {
			params[n] = true
		}
	}
	seen := map[*G.Node]bool{}
	var walk func(n *G.Node) bool
	walk = func(n *G.Node) bool {
		if params[n] {
			return true
		}
		if seen[n] {
			return false
		}
		seen[n] = true
		for it := n.Graph().From(n.ID()); it.Next(); {
			if walk(it.Node().(*G.Node)) {
				return true
			}
		}
		return false
	}
	return walk(x)
}

// layerIO records a layer's input and output shapes for summaries
// (Step.LayerIO) and returns out.
func layerIO(s *module.Step, name string, in, out *G.Node) *G.Node {
	s.LayerIO(name, in, out)
	return out
}

// seedFor mixes a step's seed with a layer's name, so that every layer (and
// every replica) draws its own random stream.
func seedFor(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	z := seed ^ h.Sum64() + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func itoa(i int) string { return strconv.Itoa(i) }

func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ClassCounts is a batch's classification counts, the state of count
// metrics. [0] is the number of rows whose label is among the topK largest
// logits (ties broken towards the lower class index, as argmax); the
// prediction is the first largest logit. With matrix, [1 + t·classes + p]
// is the number of rows of true class t predicted as p (the confusion
// matrix, rows true, columns predicted: 1 + classes² values); without, the
// vector is 1 + 3·classes values: the true positives of each class, then the
// predictions of each class, then the labels of each class (enough for
// precision, recall and F1 without the classes² matrix). logits is [batch,
// classes], labels [batch] holding class indices as floats. No gradient.
func ClassCounts(logits, labels *G.Node, topK int, matrix bool) (*G.Node, error) {
	if err := checkLogitsLabels("ClassCounts", logits, labels, nil); err != nil {
		return nil, err
	}
	s := logits.Shape()
	if topK < 1 || topK > s[1] {
		return nil, fmt.Errorf("ClassCounts: topK is %d but the logits %v have %d classes: want 1 ≤ topK ≤ %d", topK, s, s[1], s[1])
	}
	op := &classCountsOp{base: newBase("ClassCounts"), batch: s[0], classes: s[1], topK: topK, matrix: matrix}
	op.noDiff.arity = 2
	return apply(op, logits, labels)
}

type classCountsOp struct {
	base
	noDiff
	batch, classes, topK int
	matrix               bool
	out                  buffer
}

func (op *classCountsOp) size() int {
	if op.matrix {
		return 1 + op.classes*op.classes
	}
	return 1 + 3*op.classes
}

func (op *classCountsOp) Arity() int    { return 2 }
func (op *classCountsOp) Type() hm.Type { return fnType(1, 2, 1) }
func (op *classCountsOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.size()}, nil
}

func (op *classCountsOp) Do(v ...G.Value) (G.Value, error) {
	dt := v[0].Dtype()
	z, l, _, err := logitsInputs(op, v, op.batch, op.classes, false)
	if err != nil {
		return nil, err
	}
	out := op.out.get(dt, tensor.Shape{op.size()})
	if dt == tensor.Float32 {
		err = classCounts(op, data[float32](z), data[float32](l), data[float32](out))
	} else {
		err = classCounts(op, data[float64](z), data[float64](l), data[float64](out))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func classCounts[T float](op *classCountsOp, z, labels, out []T) error {
	clear(out)
	c := op.classes
	for i := 0; i < op.batch; i++ {
		k, err := classIndex(op, i, float64(labels[i]), c)
		if err != nil {
			return err
		}
		row := z[i*c : (i+1)*c]
		best, rank := 0, 0
		for j, x := range row {
			if x > row[best] {
				best = j
			}
			// Classes ranked above the label: larger, or equal and earlier.
			if x > row[k] || (x == row[k] && j < k) {
				rank++
			}
		}
		if rank < op.topK {
			out[0]++
		}
		if op.matrix {
			out[1+k*c+best]++
			continue
		}
		if best == k {
			out[1+k]++
		}
		out[1+c+best]++
		out[1+2*c+k]++
	}
	return nil
}

package nn

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/nn/ops"
)

// ClassMetrics are the classification metrics of a step, computed as
// torchmetrics' multiclass metrics compute them: from counts summed over
// the epoch's batches and across every rank (a confusion matrix and a
// top-k count), never as a mean of per-batch or per-rank values. Declare
// it once (a field of the module, or a literal) and log it in a step:
//
//	nn.ClassMetrics{PerClass: true}.Log(s, "val", logits, labels)
//
// logs, at the end of each validation epoch,
//
//	val_acc        rows whose first largest logit is the label's / rows
//	val_precision  macro precision: mean over classes of tp/(tp+fp)
//	val_recall     macro recall: mean over classes of tp/(tp+fn)
//	val_f1         macro F1: mean over classes of 2tp/(2tp+fp+fn)
//
// and with TopK k ≥ 2 val_acc_top{k}; with PerClass val_precision_class{i},
// val_recall_class{i} and val_f1_class{i}; with ConfusionMatrix
// val_confmat_{t}_{p}, the rows of true class t predicted as p
// (ConfusionMatrixOf reads it back). As in torchmetrics, a ratio whose
// denominator is 0 is 0, and the macro means leave out the classes that
// occur neither as a label nor as a prediction.
//
// The state is 1 + 3·classes counts (true positives, predictions and labels
// of each class), or 1 + classes² with ConfusionMatrix: mind it for
// thousands of classes, where the matrix is summed at every batch.
//
// In training graphs the rows a DistributedSampler adds to even out the
// shards are counted, like the loss; in evaluation a padded row (the one a
// rank gets when the set is smaller than the job, or fsdp's) counts nothing.
type ClassMetrics struct {
	TopK            int  // also log the top-k accuracy (k ≥ 2)
	PerClass        bool // also log precision, recall and F1 of each class
	ConfusionMatrix bool // also log the confusion matrix's entries
}

// Log adds the counts of logits [batch, classes] against labels [batch]
// (class indices as floats) to s's graph and logs them under name with
// module.Step.LogCounts. It panics, naming the shapes, when they do not
// fit; the trainer turns that into an error of the step.
func (m ClassMetrics) Log(s *module.Step, name string, logits, labels *G.Node, opts ...module.LogOption) {
	if logits == nil || labels == nil {
		panic(fmt.Errorf("nn.ClassMetrics %q: logits or labels is nil", name))
	}
	if m.TopK < 0 || m.TopK == 1 {
		panic(fmt.Errorf("nn.ClassMetrics %q: TopK is %d: want 0 (top-1 only: %s_acc is the top-1 accuracy) or k ≥ 2", name, m.TopK, name))
	}
	if sh := logits.Shape(); len(sh) == 2 && sh[1] < 2 {
		panic(fmt.Errorf("nn.ClassMetrics %q: logits have shape %v: want [batch, classes] with 2 classes or more (for one logit per row, log [-z, z])", name, sh))
	}
	k := max(m.TopK, 1)
	n, err := ops.ClassCounts(logits, labels, k, m.ConfusionMatrix)
	if err != nil {
		panic(fmt.Errorf("nn.ClassMetrics %q: %w", name, err))
	}
	s.LogCounts(name, n, m, opts...)
}

// Values derives the metrics from counts laid out as ops.ClassCounts
// makes them, with the confusion matrix when m.ConfusionMatrix is set
// (module.CountMetric).
func (m ClassMetrics) Values(name string, counts []float64, out map[string]float64) {
	var c int
	var tp, rows, cols, cm []float64 // rows: labels of each class (tp + fn); cols: predictions (tp + fp)
	if m.ConfusionMatrix {
		c = int(math.Round(math.Sqrt(float64(len(counts) - 1))))
		if c < 2 || 1+c*c != len(counts) {
			return
		}
		cm = counts[1:]
		tp, rows, cols = make([]float64, c), make([]float64, c), make([]float64, c)
		for t := 0; t < c; t++ {
			for p := 0; p < c; p++ {
				rows[t] += cm[t*c+p]
				cols[p] += cm[t*c+p]
			}
			tp[t] = cm[t*c+t]
		}
	} else {
		c = (len(counts) - 1) / 3
		if c < 2 || 1+3*c != len(counts) {
			return
		}
		tp, cols, rows = counts[1:1+c], counts[1+c:1+2*c], counts[1+2*c:]
	}
	var total, correct float64
	for i := 0; i < c; i++ {
		total += rows[i]
		correct += tp[i]
	}
	out[name+"_acc"] = ratio(correct, total)
	if m.TopK >= 2 {
		out[name+"_acc_top"+strconv.Itoa(m.TopK)] = ratio(counts[0], total)
	}
	var sp, sr, sf float64
	var present int
	for i := 0; i < c; i++ {
		p, r := ratio(tp[i], cols[i]), ratio(tp[i], rows[i])
		f := ratio(2*tp[i], rows[i]+cols[i])
		if rows[i]+cols[i] > 0 {
			present++
			sp, sr, sf = sp+p, sr+r, sf+f
		}
		if m.PerClass {
			k := "_class" + strconv.Itoa(i)
			out[name+"_precision"+k], out[name+"_recall"+k], out[name+"_f1"+k] = p, r, f
		}
	}
	out[name+"_precision"] = ratio(sp, float64(present))
	out[name+"_recall"] = ratio(sr, float64(present))
	out[name+"_f1"] = ratio(sf, float64(present))
	if m.ConfusionMatrix {
		for t := 0; t < c; t++ {
			for p := 0; p < c; p++ {
				out[name+"_confmat_"+strconv.Itoa(t)+"_"+strconv.Itoa(p)] = cm[t*c+p]
			}
		}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// ConfusionMatrixOf reads the confusion matrix logged by ClassMetrics with
// ConfusionMatrix set under name (as in "val") back from a map of metrics
// (trainer.Trainer.Metrics, or what Validate returns): [true][predicted].
func ConfusionMatrixOf(metrics map[string]float64, name string) ([][]float64, error) {
	prefix := name + "_confmat_"
	c := 0
	for k := range metrics {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			t, _, _ := strings.Cut(rest, "_")
			if i, err := strconv.Atoi(t); err == nil && i+1 > c {
				c = i + 1
			}
		}
	}
	if c == 0 {
		return nil, fmt.Errorf("no confusion matrix logged under %q: log nn.ClassMetrics{ConfusionMatrix: true} with that name", name)
	}
	m := make([][]float64, c)
	for t := range m {
		m[t] = make([]float64, c)
		for p := range m[t] {
			v, ok := metrics[prefix+strconv.Itoa(t)+"_"+strconv.Itoa(p)]
			if !ok {
				return nil, fmt.Errorf("the confusion matrix %q lacks entry %s%d_%d", name, prefix, t, p)
			}
			m[t][p] = v
		}
	}
	return m, nil
}

var _ module.CountMetric = ClassMetrics{}

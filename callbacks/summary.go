package callbacks

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/olekukonko/tablewriter"
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/trainer"
)

// ModelSummary prints a table of the model's layers at fit start (rank 0):
// name, type and parameter count of each layer the module recorded with
// Builder.Layer, then the trainable, non-trainable and total counts and
// the size of parameters and buffers in MB. The zero ModelSummary
// (&callbacks.ModelSummary{}) is NewModelSummary(nil, 0)'s: every layer, on
// os.Stdout.
type ModelSummary struct {
	out      io.Writer
	maxDepth int
}

var (
	_ trainer.FitStartHook    = (*ModelSummary)(nil)
	_ trainer.LayerShapesUser = (*ModelSummary)(nil)
)

// WantsLayerShapes asks the trainer for each layer's input and output
// shapes, shown as Lightning's summary shows them for an example input.
func (m *ModelSummary) WantsLayerShapes() bool { return true }

// NewModelSummary writes to out (nil: os.Stdout), showing layers nested up
// to maxDepth dots deep (0: all; 1: top-level layers only).
func NewModelSummary(out io.Writer, maxDepth int) (*ModelSummary, error) {
	if maxDepth < 0 {
		return nil, fmt.Errorf("ModelSummary maxDepth is %d: use 0 (all layers) or more", maxDepth)
	}
	if out == nil {
		out = os.Stdout
	}
	return &ModelSummary{out: out, maxDepth: maxDepth}, nil
}

func (m *ModelSummary) Name() string { return "ModelSummary" }

func (m *ModelSummary) OnFitStart(ctx context.Context, s *trainer.State) error {
	if !s.IsGlobalZero {
		return nil
	}
	out := m.out
	if out == nil {
		out = os.Stdout // the zero ModelSummary's, as NewModelSummary(nil, 0)'s
	}
	return WriteSummary(out, s.Layers(), s.Weights, m.maxDepth)
}

// WriteSummary writes the summary table of layers and store to w.
func WriteSummary(w io.Writer, layers []module.LayerInfo, st trainer.Weights, maxDepth int) error {
	shapes := false
	for _, l := range layers {
		shapes = shapes || l.InShape != nil || l.OutShape != nil
	}
	tw := tablewriter.NewWriter(w)
	header := []string{"", "Name", "Type", "Params"}
	align := []int{tablewriter.ALIGN_RIGHT, tablewriter.ALIGN_LEFT, tablewriter.ALIGN_LEFT, tablewriter.ALIGN_RIGHT}
	if shapes {
		header = append(header, "In sizes", "Out sizes")
		align = append(align, tablewriter.ALIGN_LEFT, tablewriter.ALIGN_LEFT)
	}
	tw.SetHeader(header)
	tw.SetAutoFormatHeaders(false)
	tw.SetColumnAlignment(align)
	i := 0
	for _, l := range layers {
		if maxDepth > 0 && strings.Count(l.Name, ".")+1 > maxDepth {
			continue
		}
		name := l.Name
		if name == "" {
			name = "(root)"
		}
		row := []string{fmt.Sprint(i), name, l.Type, HumanCount(l.Params)}
		if shapes {
			row = append(row, sizes(l.InShape), sizes(l.OutShape))
		}
		tw.Append(row)
		i++
	}
	tw.Render()
	if st.Len() == 0 {
		return nil
	}
	trainable := st.NumParams()
	total := st.Len()
	size := 4
	if st.Dtype() == tensor.Float64 {
		size = 8
	}
	_, err := fmt.Fprintf(w, "%-10s Trainable params\n%-10s Non-trainable params\n%-10s Total params\n%-10.3f Total estimated model params size (MB)\n",
		HumanCount(trainable), HumanCount(total-trainable), HumanCount(total), float64(total*size)/1e6)
	return err
}

// sizes writes a shape as Lightning's summary does, "[64, 1, 28, 28]", or
// "?" when unknown.
func sizes(shape []int) string {
	if shape == nil {
		return "?"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// HumanCount writes n as Lightning does: 950, 1.2 K, 3.4 M, 5.6 B.
func HumanCount(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1e6:
		return fmt.Sprintf("%.1f K", float64(n)/1e3)
	case n < 1e9:
		return fmt.Sprintf("%.1f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f B", float64(n)/1e9)
}

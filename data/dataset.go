package data

import (
	"errors"
	"fmt"
	"strings"
)

// Field describes one named per-example tensor of a Dataset, for example
// {"x", [1, 28, 28]} for an image or {"y", []} for a scalar label.
type Field struct {
	Name  string
	Shape []int
}

// Size is the number of float32 values one example holds for this field: the
// product of Shape, and 1 for a scalar (empty Shape).
func (f Field) Size() int {
	n := 1
	for _, d := range f.Shape {
		n *= d
	}
	return n
}

func (f Field) String() string {
	return fmt.Sprintf("%s%v", f.Name, f.Shape)
}

// Dataset is a random-access collection of examples, each made of the same
// fields. Read is called from the Loader's prefetch goroutine, and from
// several goroutines at once when loaders over the same dataset run at the
// same time, so it must not mutate shared state without locking (reading
// immutable memory, as the datasets of this package do, needs none).
type Dataset interface {
	// Len is the number of examples.
	Len() int
	// Fields lists the per-example tensors, in the order Read fills them.
	Fields() []Field
	// Read copies example i into dst; dst[f] has length Fields()[f].Size().
	Read(i int, dst [][]float32) error
}

// Batch is a group of examples laid out field by field, row-major. A batch
// returned by Iter.Next is valid until the next call to Next or Close.
type Batch struct {
	// Size is the number of rows (at most the batch size; the last batch of
	// an epoch may be smaller unless DropLast is set).
	Size int
	// Fields describes the columns of Data.
	Fields []Field
	// Data holds, per field, Size*Fields[f].Size() values.
	Data [][]float32
	// Data64, when set, holds the values in float64 instead of Data (which
	// is then nil), laid out the same way: a batch for a float64 model
	// (Precision "64") whose inputs are float64, as infer.Model.Batch64
	// makes them. Loaders never set it.
	Data64 [][]float64
	// Indices is the dataset index of each row.
	Indices []int
	// Pad is true for rows that are duplicates added by a DistributedSampler
	// to even out shards: count them in training, leave them out of metrics.
	Pad []bool

	dst [][]float32 // per-row views handed to Dataset.Read
}

// Field returns the values of the named field, and false when the batch has
// no such field.
func (b *Batch) Field(name string) ([]float32, bool) {
	for i, f := range b.Fields {
		if f.Name == name {
			return b.Data[i], true
		}
	}
	return nil, false
}

// NumPad is the number of padding rows in the batch.
func (b *Batch) NumPad() int {
	n := 0
	for _, p := range b.Pad {
		if p {
			n++
		}
	}
	return n
}

// checkFields reports every problem with a dataset's field list at once.
func checkFields(fields []Field) error {
	var errs []error
	if len(fields) == 0 {
		errs = append(errs, errors.New("dataset has no fields: Fields() must list at least one, e.g. {\"x\", [1, 28, 28]}"))
	}
	seen := map[string]bool{}
	for i, f := range fields {
		if strings.TrimSpace(f.Name) == "" {
			errs = append(errs, fmt.Errorf("field %d has an empty name: give every field a name such as \"x\" or \"y\"", i))
		} else if seen[f.Name] {
			errs = append(errs, fmt.Errorf("field name %q appears twice: field names must be unique", f.Name))
		}
		seen[f.Name] = true
		for _, d := range f.Shape {
			if d < 1 {
				errs = append(errs, fmt.Errorf("field %q has shape %v: every dimension must be 1 or more (use an empty shape for a scalar)", f.Name, f.Shape))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// InMemory is a Dataset whose examples are held in float32 slices, one per
// field, row-major. It suits synthetic data and tests.
type InMemory struct {
	fields []Field
	cols   [][]float32
	n      int
}

var _ Dataset = (*InMemory)(nil)

// NewInMemory builds a dataset from one slice per field; cols[f] holds
// n*fields[f].Size() values for n examples, and every field must agree on n.
// The slices are used, not copied.
func NewInMemory(fields []Field, cols [][]float32) (*InMemory, error) {
	if err := checkFields(fields); err != nil {
		return nil, fmt.Errorf("data.NewInMemory: %w", err)
	}
	if len(cols) != len(fields) {
		return nil, fmt.Errorf("data.NewInMemory: %d fields but %d data slices: pass one slice per field", len(fields), len(cols))
	}
	n := -1
	var errs []error
	for f, c := range cols {
		w := fields[f].Size()
		if len(c)%w != 0 {
			errs = append(errs, fmt.Errorf("field %q: %d values is not a multiple of the example size %d", fields[f].Name, len(c), w))
			continue
		}
		if n == -1 {
			n = len(c) / w
		} else if len(c)/w != n {
			errs = append(errs, fmt.Errorf("field %q holds %d examples but field %q holds %d: every field needs the same count", fields[f].Name, len(c)/w, fields[0].Name, n))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("data.NewInMemory: %w", errors.Join(errs...))
	}
	return &InMemory{fields: fields, cols: cols, n: n}, nil
}

// Len is the number of examples.
func (d *InMemory) Len() int { return d.n }

// Fields lists the fields.
func (d *InMemory) Fields() []Field { return d.fields }

// Read copies example i into dst.
func (d *InMemory) Read(i int, dst [][]float32) error {
	if i < 0 || i >= d.n {
		return fmt.Errorf("index %d out of range [0, %d)", i, d.n)
	}
	if err := checkDst(d.fields, dst); err != nil {
		return err
	}
	for f, c := range d.cols {
		w := len(dst[f])
		copy(dst[f], c[i*w:(i+1)*w])
	}
	return nil
}

// checkDst verifies that dst matches the fields; it allocates nothing when it
// succeeds.
func checkDst(fields []Field, dst [][]float32) error {
	if len(dst) != len(fields) {
		return fmt.Errorf("dst has %d slices for %d fields", len(dst), len(fields))
	}
	for f := range fields {
		if w := fields[f].Size(); len(dst[f]) != w {
			return fmt.Errorf("dst for field %q has length %d, want %d", fields[f].Name, len(dst[f]), w)
		}
	}
	return nil
}

// Subset is a view of some examples of another dataset, in a given order.
type Subset struct {
	ds  Dataset
	idx []int
}

var _ Dataset = (*Subset)(nil)

// NewSubset returns the view of ds made of the examples idx (which may repeat
// or reorder them). The slice is copied.
func NewSubset(ds Dataset, idx []int) (*Subset, error) {
	if ds == nil {
		return nil, errors.New("data.NewSubset: dataset is nil")
	}
	n := ds.Len()
	for k, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("data.NewSubset: idx[%d] = %d is out of range for a dataset of %d examples", k, i, n)
		}
	}
	return &Subset{ds: ds, idx: append([]int(nil), idx...)}, nil
}

// Len is the number of examples in the view.
func (s *Subset) Len() int { return len(s.idx) }

// Fields lists the fields of the underlying dataset.
func (s *Subset) Fields() []Field { return s.ds.Fields() }

// Read copies example i of the view.
func (s *Subset) Read(i int, dst [][]float32) error {
	if i < 0 || i >= len(s.idx) {
		return fmt.Errorf("index %d out of range [0, %d)", i, len(s.idx))
	}
	return s.ds.Read(s.idx[i], dst)
}

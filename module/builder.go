package module

import (
	"errors"
	"fmt"
	"strings"

	"gorgonia.org/tensor"
)

// Spec declares one named tensor of a module.
type Spec struct {
	Name  string
	Shape []int
	Init  Init
	// Buffer marks a tensor that is saved, broadcast and checkpointed but not
	// learned (BatchNorm running statistics, for example).
	Buffer bool
}

// Size is the number of elements of the tensor.
func (s Spec) Size() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// Builder collects the parameters and buffers a module declares in Configure.
// Problems are collected and reported together by Specs.
type Builder struct {
	dtype  tensor.Dtype
	prefix string
	root   *builderState
}

type builderState struct {
	specs []Spec
	index map[string]bool
	errs  []error
	meta  []LayerInfo
}

// LayerInfo describes one layer for summaries (ModelSummary).
type LayerInfo struct {
	Name   string
	Type   string
	Params int
	// InShape and OutShape are the layer's input and output shapes, batch
	// dimension first, for the training batch size; nil when unknown (the
	// layer records none through Step.LayerIO, or no graph was built).
	InShape, OutShape []int
}

// NewBuilder returns a Builder for a model computed in dtype (tensor.Float32
// or tensor.Float64).
func NewBuilder(dtype tensor.Dtype) *Builder {
	return &Builder{dtype: dtype, root: &builderState{index: map[string]bool{}}}
}

// Dtype is the dtype the model's parameters and graph use.
func (b *Builder) Dtype() tensor.Dtype { return b.dtype }

// Scope returns a Builder whose names are prefixed with "prefix." (nested
// scopes join with dots, as in "layer1.0.conv1.weight").
func (b *Builder) Scope(prefix string) *Builder {
	return &Builder{dtype: b.dtype, prefix: b.join(prefix), root: b.root}
}

// Name is the full name a tensor called name gets in this scope.
func (b *Builder) Name(name string) string { return b.join(name) }

func (b *Builder) join(name string) string {
	if b.prefix == "" {
		return name
	}
	return b.prefix + "." + name
}

// Param declares a learnable tensor and returns its full name.
func (b *Builder) Param(name string, shape []int, init Init) string {
	return b.add(Spec{Name: b.join(name), Shape: append([]int(nil), shape...), Init: init})
}

// Buffer declares a saved, non-learnable tensor and returns its full name.
func (b *Builder) Buffer(name string, shape []int, init Init) string {
	return b.add(Spec{Name: b.join(name), Shape: append([]int(nil), shape...), Init: init, Buffer: true})
}

// Layer records a layer for summaries; layers in nn call it.
func (b *Builder) Layer(typ string, params int) {
	b.root.meta = append(b.root.meta, LayerInfo{Name: b.prefix, Type: typ, Params: params})
}

// Errorf records a problem found while configuring (a bad layer size, say).
func (b *Builder) Errorf(format string, args ...any) {
	b.root.errs = append(b.root.errs, fmt.Errorf(format, args...))
}

func (b *Builder) add(s Spec) string {
	switch {
	case s.Name == "" || strings.HasSuffix(s.Name, "."):
		b.root.errs = append(b.root.errs, fmt.Errorf("a tensor was declared with an empty name in scope %q: give every Param and Buffer a name", b.prefix))
		return s.Name
	case b.root.index[s.Name]:
		b.root.errs = append(b.root.errs, fmt.Errorf("tensor %q is declared twice: use a distinct name or a Scope per layer", s.Name))
		return s.Name
	}
	for _, d := range s.Shape {
		if d <= 0 {
			b.root.errs = append(b.root.errs, fmt.Errorf("tensor %q has shape %v: every dimension must be 1 or more", s.Name, s.Shape))
			return s.Name
		}
	}
	if s.Init == nil {
		s.Init = Zeros()
	}
	b.root.index[s.Name] = true
	b.root.specs = append(b.root.specs, s)
	return s.Name
}

// Specs returns the declared tensors in declaration order, or every problem
// found while declaring them.
func (b *Builder) Specs() ([]Spec, error) {
	if len(b.root.errs) > 0 {
		return nil, errors.Join(b.root.errs...)
	}
	return append([]Spec(nil), b.root.specs...), nil
}

// Layers returns the layers recorded with Layer, in declaration order.
func (b *Builder) Layers() []LayerInfo { return append([]LayerInfo(nil), b.root.meta...) }

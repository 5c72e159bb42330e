package data

import (
	"errors"
	"fmt"
	"math"
)

// MeanStd returns the mean and the standard deviation (the population's, as
// scikit-learn's StandardScaler takes it) of each value of the named field
// over the examples of ds, computed in float64. Give it the training part
// only, and Normalize every part with what it returns.
func MeanStd(ds Dataset, field string) (mean, std []float32, err error) {
	if ds == nil {
		return nil, nil, errors.New("data.MeanStd: dataset is nil")
	}
	fs := ds.Fields()
	f, err := fieldIndex(fs, field)
	if err != nil {
		return nil, nil, fmt.Errorf("data.MeanStd: %w", err)
	}
	n := ds.Len()
	if n == 0 {
		return nil, nil, errors.New("data.MeanStd: the dataset has no examples")
	}
	dst := make([][]float32, len(fs))
	for i := range fs {
		dst[i] = make([]float32, fs[i].Size())
	}
	// Welford's running mean and sum of squared deviations: a column far
	// from zero with a small spread keeps its variance, which the sum of
	// squares minus the squared mean loses.
	w := fs[f].Size()
	mu, m2 := make([]float64, w), make([]float64, w)
	for i := 0; i < n; i++ {
		if err := ds.Read(i, dst); err != nil {
			return nil, nil, fmt.Errorf("data.MeanStd: example %d: %w", i, err)
		}
		for k, v := range dst[f] {
			d := float64(v) - mu[k]
			mu[k] += d / float64(i+1)
			m2[k] += d * (float64(v) - mu[k])
		}
	}
	mean, std = make([]float32, w), make([]float32, w)
	for k := range mu {
		mean[k] = float32(mu[k])
		std[k] = float32(math.Sqrt(m2[k] / float64(n)))
	}
	return mean, std, nil
}

// Normalized is a view of a dataset with one field standardised; see
// Normalize.
type Normalized struct {
	ds        Dataset
	f         int
	mean, std []float32
}

var _ Dataset = (*Normalized)(nil)

// Normalize returns a view of ds whose named field reads (v-mean[k])/std[k]
// for its k-th value, as torchvision's transforms.Normalize; the other fields
// and ds itself are unchanged. mean and std hold one value per value of the
// field (MeanStd's), each finite, and every std above 0: a value that is the
// same in every example has std 0, so pass 1 for it (scikit-learn's choice)
// or leave the column out.
func Normalize(ds Dataset, field string, mean, std []float32) (*Normalized, error) {
	if ds == nil {
		return nil, errors.New("data.Normalize: dataset is nil")
	}
	fs := ds.Fields()
	f, err := fieldIndex(fs, field)
	if err != nil {
		return nil, fmt.Errorf("data.Normalize: %w", err)
	}
	w := fs[f].Size()
	if len(mean) != w || len(std) != w {
		return nil, fmt.Errorf("data.Normalize: mean has %d values and std %d but field %q holds %d: give one of each per value", len(mean), len(std), field, w)
	}
	var errs []error
	for k := range mean {
		if m := float64(mean[k]); math.IsNaN(m) || math.IsInf(m, 0) {
			errs = append(errs, fmt.Errorf("mean[%d] is %v: a mean must be finite (a NaN in the data?)", k, m))
		}
		if s := float64(std[k]); s == 0 {
			errs = append(errs, fmt.Errorf("std[%d] is 0 (the value is the same in every example): pass 1 for it or leave the column out", k))
		} else if !(s > 0) || math.IsInf(s, 0) {
			errs = append(errs, fmt.Errorf("std[%d] is %v: it must be finite and above 0", k, s))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("data.Normalize field %q: %w", field, errors.Join(errs...))
	}
	return &Normalized{ds: ds, f: f, mean: append([]float32(nil), mean...), std: append([]float32(nil), std...)}, nil
}

// Len is the number of examples of the dataset underneath.
func (d *Normalized) Len() int { return d.ds.Len() }

// Fields lists the fields of the dataset underneath.
func (d *Normalized) Fields() []Field { return d.ds.Fields() }

// Read copies example i, its field standardised.
func (d *Normalized) Read(i int, dst [][]float32) error {
	if err := d.ds.Read(i, dst); err != nil {
		return err
	}
	v := dst[d.f]
	for k := range v {
		v[k] = (v[k] - d.mean[k]) / d.std[k]
	}
	return nil
}

func fieldIndex(fs []Field, name string) (int, error) {
	for i, f := range fs {
		if f.Name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no field %q: the fields are %v", name, fs)
}

package data

import (
	"errors"
	"strings"
	"sync/atomic"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// seqDataset holds n examples whose field "x" (shape [2]) is (i, -i) and "y"
// is i%10; it counts reads and can fail or block on a chosen index.
type seqDataset struct {
	n      int
	reads  atomic.Int64
	failAt int // -1: never
	panic  bool
}

func newSeq(n int) *seqDataset { return &seqDataset{n: n, failAt: -1} }

func (d *seqDataset) Len() int { return d.n }
func (d *seqDataset) Fields() []Field {
	return []Field{{Name: "x", Shape: []int{2}}, {Name: "y"}}
}
func (d *seqDataset) Read(i int, dst [][]float32) error {
	d.reads.Add(1)
	if i == d.failAt {
		if d.panic {
			panic("boom")
		}
		return errors.New("disk on fire")
	}
	dst[0][0], dst[0][1] = float32(i), -float32(i)
	dst[1][0] = float32(i % 10)
	return nil
}

package ddp

import (
	"fmt"

	"github.com/fulgur-ml/fulgur/module"
)

// DefaultBucketBytes is the gradient bucket cap of DDP when none is set
// (25 MiB, as in PyTorch).
const DefaultBucketBytes = 25 << 20

// Bucket is the span [Lo, Hi) of the flat gradient buffer reduced by one
// all-reduce.
type Bucket struct {
	Lo, Hi int
	// Params names the parameters in the bucket, in the order they were
	// added (reverse store order).
	Params []string
}

// Len is the number of elements in the bucket.
func (b Bucket) Len() int { return b.Hi - b.Lo }

// Buckets lays out gradient buckets over a store's learnable parameters.
// Parameters are taken in reverse store order, the order backward produces
// their gradients, and consecutive ones share a bucket until the next would
// take it past capBytes; a parameter larger than the cap gets a bucket of its
// own. Because parameters are contiguous in the flat buffer, every bucket is
// one contiguous span, reduced in place without a copy. Buckets are returned
// in the order they fill (highest offsets first).
func Buckets(entries []module.Entry, elemBytes, capBytes int) ([]Bucket, error) {
	if elemBytes <= 0 || capBytes <= 0 {
		return nil, fmt.Errorf("bucket cap of %d bytes for %d-byte elements: use positive sizes", capBytes, elemBytes)
	}
	var out []Bucket
	var cur *Bucket
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Buffer || e.Len == 0 {
			continue
		}
		if cur != nil && cur.Lo != e.Offset+e.Len {
			return nil, fmt.Errorf("parameter %q ends at %d but the next one starts at %d: the store is not contiguous", e.Name, e.Offset+e.Len, cur.Lo)
		}
		if cur == nil || (cur.Len()+e.Len)*elemBytes > capBytes {
			out = append(out, Bucket{Lo: e.Offset, Hi: e.Offset + e.Len})
			cur = &out[len(out)-1]
		} else {
			cur.Lo = e.Offset
		}
		cur.Params = append(cur.Params, e.Name)
	}
	return out, nil
}

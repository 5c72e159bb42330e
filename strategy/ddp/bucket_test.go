package ddp_test

import (
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/module"
	"github.com/fulgur-ml/fulgur/strategy/ddp"
)

func storeOf(t *testing.T, sizes ...int) *module.Store {
	t.Helper()
	var specs []module.Spec
	for i, n := range sizes {
		specs = append(specs, module.Spec{Name: fmt.Sprintf("p%d", i), Shape: []int{n}})
	}
	specs = append(specs, module.Spec{Name: "buf", Shape: []int{7}, Buffer: true})
	st, err := module.NewStore(specs, tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestBuckets(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		cap   int // bytes
		want  string
	}{
		// 4-byte elements. Reverse order: p3, p2, p1, p0.
		{[]int{10, 20, 30, 40}, 1 << 20, "[0,100){p3 p2 p1 p0}"},
		{[]int{10, 20, 30, 40}, 4 * 50, "[60,100){p3} [10,60){p2 p1} [0,10){p0}"},
		{[]int{10, 20, 30, 40}, 4 * 70, "[30,100){p3 p2} [0,30){p1 p0}"},
		// A parameter over the cap gets its own bucket.
		{[]int{5, 100, 5}, 4 * 20, "[105,110){p2} [5,105){p1} [0,5){p0}"},
		{[]int{3}, 4, "[0,3){p0}"},
	} {
		bs, err := ddp.Buckets(storeOf(t, tc.sizes...).Entries(), 4, tc.cap)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, b := range bs {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("[%d,%d){%s}", b.Lo, b.Hi, strings.Join(b.Params, " "))
		}
		if got != tc.want {
			t.Errorf("sizes %v cap %d: buckets %s, want %s", tc.sizes, tc.cap, got, tc.want)
		}
	}
	if _, err := ddp.Buckets(nil, 4, 0); err == nil {
		t.Error("a zero cap was accepted")
	}
}

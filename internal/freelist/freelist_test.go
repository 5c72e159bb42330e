package freelist_test

import (
	"runtime"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/freelist"
)

// A value put back is the one the next Get returns, after a GC as before
// (where a sync.Pool would have dropped it), and an empty list makes a
// zero value.
func TestListKeepsValuesAcrossGC(t *testing.T) {
	var l freelist.List[[4]int]
	a := l.Get()
	if *a != [4]int{} {
		t.Fatalf("Get of an empty list = %v, want a zero value", *a)
	}
	a[0] = 7
	l.Put(a)
	runtime.GC()
	runtime.GC()
	if b := l.Get(); b != a || b[0] != 7 {
		t.Fatalf("Get after Put and two GCs = %p (%v), want the value put, %p", b, *b, a)
	}
	if c := l.Get(); c == a {
		t.Fatal("a second Get returned the value the first one took")
	}
}

//go:build mpi

package mpi

/*
#include <mpi.h>
static int fl_undefined_color(void) { return MPI_UNDEFINED; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"

	"github.com/fulgur-ml/fulgur/strategy/collective"
)

var _ collective.Splitter = (*Group)(nil)

// Split implements collective.Splitter with MPI_Comm_split, once the ranks
// have checked their colors and keys with each other (collective.SplitWith:
// a bad value is an error on every rank instead of MPI's abort). It needs
// MPI_THREAD_MULTIPLE, which New asks for: a sub-group's operations run
// at the same time as its parent's and its siblings'.
func (g *Group) Split(ctx context.Context, color, key int) (collective.Collective, error) {
	if !threadMultiple {
		// Every rank runs the same library: they all refuse alike.
		return nil, errors.New("mpi: split: this MPI library does not provide MPI_THREAD_MULTIPLE, which sub-groups need (their operations run at the same time as the parent's): use an MPI built with thread support (Open MPI 4 or later is)")
	}
	return collective.SplitWith(ctx, g, color, key, func(ctx context.Context, l collective.Layout) (collective.Collective, error) {
		// The leader's parent rank names the sub-group within int range.
		c, k := C.int(0), C.int(l.Rank)
		if l.Members == nil {
			c, k = C.fl_undefined_color(), 0
		} else {
			c = C.int(l.Members[0])
		}
		var comm C.MPI_Comm
		if rc := C.MPI_Comm_split(g.comm, c, k, &comm); rc != C.MPI_SUCCESS {
			return nil, fmt.Errorf("mpi: MPI_Comm_split: %s", errString(rc))
		}
		if l.Members == nil {
			return nil, nil
		}
		return newGroup(comm), nil
	})
}

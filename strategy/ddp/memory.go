package ddp

import (
	"gorgonia.org/tensor"

	"github.com/fulgur-ml/fulgur/strategy"
)

var _ strategy.MemoryReporter = (*DDP)(nil)

// Memory reports a DDP rank's memory: everything is replicated.
func (d *DDP) Memory() strategy.Memory {
	st, e := d.eng.Store(), 4
	if st.Dtype() == tensor.Float64 {
		e = 8
	}
	opt := 0
	for _, b := range d.opt.State().Buffers {
		opt += len(b) * e
	}
	return strategy.Memory{Params: st.Len() * e, LocalGrads: st.NumParams() * e, ReducedGrads: st.NumParams() * e, OptimizerState: opt}
}

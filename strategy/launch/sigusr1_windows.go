package launch

// sigUSR1 stands for SLURM's warning signal, which Windows does not have:
// it is never delivered there.
var sigUSR1 = noSignal("SIGUSR1")

// noSignal is a signal the platform cannot deliver.
type noSignal string

func (s noSignal) Signal()        {}
func (s noSignal) String() string { return string(s) }

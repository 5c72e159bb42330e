package builtin

import "github.com/fulgur-ml/fulgur/profiler"

// profilerOf returns p, or Nop when p is nil.
func profilerOf(p profiler.Profiler) profiler.Profiler {
	if p == nil {
		return profiler.Nop{}
	}
	return p
}

// profiling reports whether p records anything.
func profiling(p profiler.Profiler) bool {
	_, nop := p.(profiler.Nop)
	return p != nil && !nop
}

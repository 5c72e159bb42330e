package collective

// StopAgreer is implemented by groups that log a peer's end (tcp): once
// StopAgreed is called, the ranks have agreed to stop (a signal or a
// cancelled context every rank learnt of), so a peer that ends before this
// rank closes its group ends as agreed, not lost, and the group logs it at
// debug level instead of warning. Operations still fail as they would: only
// the log changes.
type StopAgreer interface {
	StopAgreed()
}

// StopAgreed tells c, or the group it wraps (an Unwrap method returning a
// Collective, as WithAsync's has), that the ranks agreed to stop; a group
// that is no StopAgreer is left alone.
func StopAgreed(c Collective) {
	for c != nil {
		if s, ok := c.(StopAgreer); ok {
			s.StopAgreed()
			return
		}
		u, ok := c.(interface{ Unwrap() Collective })
		if !ok {
			return
		}
		c = u.Unwrap()
	}
}

// Package collectivetest is the conformance suite every collective backend
// passes: RunAll(t, newGroup) checks every operation for 1 to 5 ranks, buffer
// lengths 0, 1, odd, not divisible by the rank count and (without -short)
// 100 MB, float32 and float64, against results computed element by element in
// the test; concurrent async operations; mismatched calls; and a closed peer.
//
// It imports only testing, the standard library and strategy/collective.
package collectivetest

// Package inproc is the in-process collective backend: the ranks of a group
// are goroutines of one process sharing memory. Reductions run in fixed rank
// order (((r0 op r1) op r2) ...), so results are bitwise reproducible from run
// to run whatever the scheduling. Options inject faults (KillRank, DelayRank)
// so strategy tests can exercise error paths.
//
// It is the fake every strategy test uses. It must not import trainer,
// strategy or any other backend.
package inproc

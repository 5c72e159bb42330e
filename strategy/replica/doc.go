// Package replica is the machinery that strategy implementations share, for
// strategy/<name> packages only (users build strategies by name or through
// their constructors): the optimizer step over reduced gradients
// (ApplyStep) and the hook before it (BeforeUpdate).
//
// replica imports strategy, module and optim; no strategy/<name> package,
// no collective backend, and nothing above the strategies (internal/archtest
// checks it). Every strategy/<name> may import it.
package replica

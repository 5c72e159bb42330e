// Package gradcheck checks the gradients Gorgonia computes symbolically (Grad
// plus a TapeMachine, as the trainer runs them) against central differences.
//
// A Case builds a function of some input tensors; Check projects its output
// onto a fixed random direction (so every output element matters), takes the
// symbolic gradient of that scalar with respect to each input, and compares
// it with (f(x+ε) - f(x-ε)) / 2ε element by element, the projection summed
// in float64. Before the measured run the symbolic graph runs once on other
// inputs, so an op that keeps stale state between runs is caught.
//
// Elements where the function has a kink (ReLU at 0, a max-pool tie) are
// detected by comparing the differences taken with ε and ε/2 and skipped; a
// case fails if too many are skipped, so a wrong gradient cannot hide as a
// kink.
//
// gradcheck imports only Gorgonia and tensor; it knows nothing of nn's ops,
// so any op or layer can be checked with it.
package gradcheck

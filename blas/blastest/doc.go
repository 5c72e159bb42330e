// Package blastest is the conformance suite every blas.Impl must pass: a new
// implementation is one line of test, blastest.Run(t, impl). It checks both
// precisions and every transpose combination against a direct triple loop,
// with leading dimensions wider than the rows and padding that must survive.
//
// blastest imports blas and the standard library only.
package blastest

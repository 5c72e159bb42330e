// Package typednil tells a typed nil: an interface value holding a nil
// pointer (or func or channel). A constructor that failed
// returns one (return nil, err from a func returning *T); passed on
// unchecked as a Module, Dataset, Callback or Logger it is not == nil, and
// its first method call crashes far from the line at fault. trainer,
// infer and data check the values users hand them with this one test, and
// say the same thing about them.
//
// It imports only the standard library and panics.
package typednil

// Package panics turns a recovered panic into an error that keeps the
// panic value and the frames between the panic and the code that recovered
// it: the user's file:line in a step, a callback or a Dataset's Read.
//
// The trainer, the data loader and the execution engine recover panics in
// user code and return them wrapped in an *Error, so a program can tell a
// panic from an ordinary failure and read where it happened:
//
//	var pe *panics.Error
//	if errors.As(err, &pe) { log.Print(pe.Value, pe.Frames[0].File) }
//
// It is public (not internal/) because those errors reach users' programs,
// and because three packages at different layers (data, the engine,
// trainer) recover the same way. It imports nothing of fulgur.
package panics

import (
	"fmt"
	"runtime"
	"strings"
)

// maxFrames bounds the frames an Error keeps.
const maxFrames = 24

// Error is a recovered panic.
type Error struct {
	// Value is what was passed to panic.
	Value any
	// Frames run from the panicking call outward to the caller of the
	// function that recovered (runtime frames left out).
	Frames []runtime.Frame
}

// Recovered builds an Error from v, the value recover returned. Call it
// directly in the deferred function literal that called recover: the
// function that deferred it bounds the frames kept.
func Recovered(v any) *Error {
	pc := make([]uintptr, 64)
	n := runtime.Callers(2, pc) // from the deferred function
	frames := runtime.CallersFrames(pc[:n])
	e := &Error{Value: v}
	first, more := frames.Next()
	stop := enclosing(first.Function) // the function that deferred the recovery
	// Skip to the panic: everything up to runtime.gopanic is the deferred
	// call itself.
	for more {
		var f runtime.Frame
		f, more = frames.Next()
		if f.Function == "runtime.gopanic" {
			break
		}
	}
	for more && len(e.Frames) < maxFrames {
		var f runtime.Frame
		f, more = frames.Next()
		if stop != "" && f.Function == stop {
			break
		}
		if strings.HasPrefix(f.Function, "runtime.") {
			continue
		}
		e.Frames = append(e.Frames, f)
	}
	// Closures of the recovering function's package between the user's
	// frames and it (the hook call wrapped for recovery) say nothing.
	if pkg := pkgOf(stop); pkg != "" {
		for len(e.Frames) > 1 && pkgOf(e.Frames[len(e.Frames)-1].Function) == pkg {
			e.Frames = e.Frames[:len(e.Frames)-1]
		}
	}
	return e
}

// enclosing strips the closure suffixes (".func1", ".deferwrap1", ".gowrap1")
// from a deferred function literal's name.
func enclosing(fn string) string {
	for {
		i := strings.LastIndexByte(fn, '.')
		if i < 0 {
			return fn
		}
		tail := fn[i+1:]
		if !strings.HasPrefix(tail, "func") && !strings.HasPrefix(tail, "deferwrap") && !strings.HasPrefix(tail, "gowrap") && !allDigits(tail) {
			return fn
		}
		fn = fn[:i]
	}
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// pkgOf is the package path of a function name such as
// "example.com/a/b.(*T).M".
func pkgOf(fn string) string {
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return ""
	}
	return fn[:slash+1+dot]
}

// framework lists the package prefixes whose frames are not the user's.
var framework = []string{"runtime.", "github.com/fulgur-ml/fulgur/", "gorgonia.org/", "gonum.org/"}

// HasUserFrame reports whether any frame is outside fulgur's own packages
// and the numerical libraries (test files of fulgur count as the user's).
func (e *Error) HasUserFrame() bool {
	for _, f := range e.Frames {
		if isUser(f) {
			return true
		}
	}
	return false
}

func isUser(f runtime.Frame) bool {
	if strings.HasSuffix(f.File, "_test.go") {
		return true
	}
	for _, p := range framework {
		if strings.HasPrefix(f.Function, p) {
			return false
		}
	}
	return true
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "panicked: %v", e.Value)
	for _, f := range e.Frames {
		fmt.Fprintf(&b, "\n\t%s\n\t\t%s:%d", f.Function, f.File, f.Line)
	}
	return b.String()
}

// Unwrap returns the panic value when it is an error (G.Must panics with
// one), so errors.Is and errors.As see through the panic.
func (e *Error) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

package typednil

import (
	"fmt"
	"reflect"

	"github.com/fulgur-ml/fulgur/panics"
)

// Is reports whether v, not nil itself, holds a nil pointer, func or
// channel: the kinds whose methods crash (or block) on nil. A nil slice or
// map is an empty value whose methods work (a Dataset of no rows, which
// its own checks report as such), so it is not one.
func Is(v any) bool {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Call returns method(arg), method being one of v's, with a panic in it
// returned as a *panics.Error. When v is a typed nil, the usual cause of
// that panic, the error says so first, calling v what (such as "module")
// and naming its type and the fix.
//
// method is a method value (m.Configure) rather than a closure, so that
// the error's frames end at the user's method.
func Call[A any](v any, what string, method func(A) error, arg A) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panics.Recovered(r)
			if Is(v) {
				err = fmt.Errorf("the %s is a nil %T (its constructor returned an error: check it, and pass the %[1]s it returns): %[3]w", what, v, err)
			}
		}
	}()
	return method(arg)
}

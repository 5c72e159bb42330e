package callbacks

import "fmt"

// literal is CheckReady's error for a struct literal of a type that needs
// its constructor (ctor, such as "NewTimer"); lacks says what the zero
// value would do wrong.
func literal(ctor, lacks string) error {
	return fmt.Errorf("a struct literal, not made by callbacks.%s, %s: make it with callbacks.%[1]s", ctor, lacks)
}

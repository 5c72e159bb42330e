package launch_test

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/launch"
)

// A listener handed over as a descriptor comes back bound to the same
// address; no variable is no listener; a value that is no number is an
// error naming the variable.
func TestInheritedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{launch.EnvListenerFD: strconv.Itoa(int(f.Fd()))}
	got, err := launch.InheritedListener(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Addr().String() != ln.Addr().String() {
		t.Errorf("inherited listener at %s, handed over %s", got.Addr(), ln.Addr())
	}
	if l, err := launch.InheritedListener(func(string) (string, bool) { return "", false }); l != nil || err != nil {
		t.Errorf("no variable: got %v, %v; want nil, nil", l, err)
	}
	_, err = launch.InheritedListener(func(string) (string, bool) { return "three", true })
	if err == nil || !strings.Contains(err.Error(), launch.EnvListenerFD) || !strings.Contains(err.Error(), `"three"`) {
		t.Errorf("a bad descriptor: %v, want an error naming %s and the value", err, launch.EnvListenerFD)
	}
}

package panics

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func recovering(f func()) (err *Error) {
	defer func() {
		if r := recover(); r != nil {
			err = Recovered(r)
		}
	}()
	f()
	return nil
}

func TestRecoveredKeepsFramesUpToTheRecoverer(t *testing.T) {
	var line int
	e := recovering(func() {
		_, _, line, _ = runtime.Caller(0)
		panic(io.ErrUnexpectedEOF)
	})
	if e == nil {
		t.Fatal("no panic recovered")
	}
	if len(e.Frames) == 0 || e.Frames[0].Line != line+1 || !strings.HasSuffix(e.Frames[0].File, "panics_test.go") {
		t.Fatalf("first frame %+v, want panics_test.go:%d", e.Frames, line+1)
	}
	for _, f := range e.Frames {
		if strings.HasSuffix(f.Function, ".recovering") || strings.HasPrefix(f.Function, "testing.") {
			t.Errorf("frame %s is outside the recovered call", f.Function)
		}
	}
	if !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Errorf("%v does not unwrap to the panic value", e)
	}
	if !e.HasUserFrame() {
		t.Error("a frame in a _test.go file is the user's")
	}
}

func TestEnclosing(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.F.func1":               "a/b.F",
		"a/b.(*T).M.func2.1":        "a/b.(*T).M",
		"a/b.F.deferwrap1":          "a/b.F",
		"a/b.F":                     "a/b.F",
		"example.com/x.y/z.G.func3": "example.com/x.y/z.G",
	} {
		if got := enclosing(in); got != want {
			t.Errorf("enclosing(%q) = %q, want %q", in, got, want)
		}
	}
}

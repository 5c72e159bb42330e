package typednil_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fulgur-ml/fulgur/internal/typednil"
	"github.com/fulgur-ml/fulgur/panics"
)

type thing struct{ n int }

func (t *thing) Size(extra int) error { _ = t.n + extra; return nil }

type fn func()
type rows []int
type byName map[string]int

func TestIs(t *testing.T) {
	var p *thing
	var f fn
	var r rows
	var m byName
	var c chan int
	for _, c := range []struct {
		name string
		v    any
		want bool
	}{
		{"nil", nil, false},
		{"nil pointer", p, true},
		{"pointer", &thing{}, false},
		{"nil func", f, true},
		{"nil slice", r, false},
		{"empty slice", rows{}, false},
		{"nil map", m, false},
		{"nil chan", c, true},
		{"struct", thing{}, false},
		{"int", 0, false},
	} {
		if got := typednil.Is(c.v); got != c.want {
			t.Errorf("Is(%s %#v) = %v, want %v", c.name, c.v, got, c.want)
		}
	}
}

func TestCallNamesATypedNil(t *testing.T) {
	var p *thing
	err := typednil.Call(p, "widget", p.Size, 1)
	var pe *panics.Error
	if !errors.As(err, &pe) {
		t.Fatalf("Call on a nil *thing: %v, want a *panics.Error", err)
	}
	for _, w := range []string{"the widget is a nil *typednil_test.thing", "pass the widget it returns", "nil pointer dereference"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if len(pe.Frames) == 0 || !strings.HasSuffix(pe.Frames[0].Function, "(*thing).Size") {
		t.Errorf("frames %v: want the first at (*thing).Size", pe.Frames)
	}
	if err := typednil.Call(&thing{}, "widget", (&thing{}).Size, 1); err != nil {
		t.Errorf("Call on a *thing: %v", err)
	}
	want := errors.New("bad size")
	if err := typednil.Call(0, "widget", func(int) error { return want }, 1); err != want {
		t.Errorf("Call returned %v, want the method's own error %v", err, want)
	}
}

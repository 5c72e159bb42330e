package cli

import (
	"encoding"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// field is one tagged struct field bound to a flag. Its Value sets the
// field in place, so the struct the program handed in holds the parsed
// values.
type field struct {
	name    string
	group   string // trainer, model or data
	help    string
	choices []string
	check   string // ">0", ">=1", "<=1", ...
	v       reflect.Value
	boolean bool
}

// fieldValue adapts a field to flag.Value.
type fieldValue struct{ f *field }

var (
	durationType = reflect.TypeFor[time.Duration]()
	flagValue    = reflect.TypeFor[flag.Value]()
	textValue    = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// structFields returns the flags of v's tagged fields: v is a pointer to a
// struct; fields tagged `flag:"name"` become -name, with `help:"..."`,
// `default:"..."` (used when the field is zero in v), `choices:"a,b"` and
// `check:">0"` (a bound, >, >=, < or <=). Embedded structs (or pointers to
// them) are walked too, so a module that embeds another exposes its flags.
// A value that is not a pointer to a struct has no flags.
func structFields(v any, group string) ([]*field, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil, nil
	}
	var out []*field
	err := walk(rv.Elem(), group, &out)
	return out, err
}

func walk(s reflect.Value, group string, out *[]*field) error {
	t := s.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		fv := s.Field(i)
		name, tagged := sf.Tag.Lookup("flag")
		if !tagged {
			if sf.Anonymous && sf.IsExported() {
				if fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().Kind() == reflect.Struct {
					fv = fv.Elem()
				}
				if fv.Kind() == reflect.Struct {
					if err := walk(fv, group, out); err != nil {
						return err
					}
				}
			}
			continue
		}
		where := fmt.Sprintf("%s field %s.%s", group, t.Name(), sf.Name)
		if !sf.IsExported() {
			return fmt.Errorf("%s is tagged flag:%q but unexported: export it or drop the tag", where, name)
		}
		if name == "" || strings.ContainsAny(name, " =,") || strings.HasPrefix(name, "-") {
			return fmt.Errorf("%s: flag name %q: use a name such as learning-rate (no spaces, '=', ',' or leading '-')", where, name)
		}
		f := &field{name: name, group: group, help: sf.Tag.Get("help"), check: sf.Tag.Get("check"), v: fv}
		if c := sf.Tag.Get("choices"); c != "" {
			f.choices = strings.Split(c, ",")
		}
		if !settable(fv) {
			return fmt.Errorf("%s has type %s, which cannot be a flag: use a string, bool, number, time.Duration, []int, or a type implementing flag.Value", where, fv.Type())
		}
		f.boolean = fv.Kind() == reflect.Bool
		if def, ok := sf.Tag.Lookup("default"); ok && fv.IsZero() {
			if err := f.set(def); err != nil {
				return fmt.Errorf("%s: default %q: %w", where, def, err)
			}
		}
		if f.check != "" {
			if _, _, err := parseCheck(f.check); err != nil {
				return fmt.Errorf("%s: check %q: %w", where, f.check, err)
			}
		}
		*out = append(*out, f)
	}
	return nil
}

func settable(v reflect.Value) bool {
	if v.CanAddr() && (v.Addr().Type().Implements(flagValue) || v.Addr().Type().Implements(textValue)) {
		return true
	}
	switch v.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Float64, reflect.Float32:
		return true
	case reflect.Slice:
		return v.Type().Elem().Kind() == reflect.Int
	}
	return false
}

// set parses s into the field; the error says what to write instead.
func (f *field) set(s string) error {
	v := f.v
	if v.CanAddr() {
		if fl, ok := v.Addr().Interface().(flag.Value); ok {
			return fl.Set(s)
		}
		if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
			return tu.UnmarshalText([]byte(s))
		}
	}
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("use a duration such as 90s or 1h30m")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("use true or false")
		}
		v.SetBool(b)
	case v.CanInt():
		n, err := strconv.ParseInt(s, 0, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("use a whole number")
		}
		v.SetInt(n)
	case v.CanUint():
		n, err := strconv.ParseUint(s, 0, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("use a whole number, 0 or more")
		}
		v.SetUint(n)
	case v.CanFloat():
		x, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("use a number such as 0.001")
		}
		v.SetFloat(x)
	case v.Kind() == reflect.Slice:
		var ns []int
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("use whole numbers separated by commas, such as 256,128")
			}
			ns = append(ns, n)
		}
		v.Set(reflect.ValueOf(ns))
	}
	return nil
}

func (f *field) String() string {
	v := f.v
	if v.CanAddr() {
		if s, ok := v.Addr().Interface().(fmt.Stringer); ok {
			return s.String()
		}
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = strconv.FormatInt(v.Index(i).Int(), 10)
		}
		return strings.Join(parts, ",")
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	return fmt.Sprint(v.Interface())
}

// validate checks the parsed value against the field's choices and bound.
func (f *field) validate() error {
	if len(f.choices) > 0 {
		s := f.String()
		for _, c := range f.choices {
			if s == c {
				return nil
			}
		}
		return f.hinted(fmt.Errorf("-%s is %q: use one of %s", f.name, s, strings.Join(f.choices, ", ")), s)
	}
	if f.check == "" {
		return nil
	}
	op, bound, _ := parseCheck(f.check)
	var x float64
	switch {
	case f.v.CanInt():
		x = float64(f.v.Int())
	case f.v.CanUint():
		x = float64(f.v.Uint())
	case f.v.CanFloat():
		x = f.v.Float()
	default:
		return nil
	}
	ok := map[string]bool{">": x > bound, ">=": x >= bound, "<": x < bound, "<=": x <= bound}[op]
	if !ok {
		return fmt.Errorf("-%s is %s: use a value %s %g", f.name, f.String(), op, bound)
	}
	return nil
}

func parseCheck(c string) (op string, bound float64, err error) {
	for _, o := range []string{">=", "<=", ">", "<"} {
		if strings.HasPrefix(c, o) {
			bound, err = strconv.ParseFloat(strings.TrimSpace(c[len(o):]), 64)
			if err != nil {
				return "", 0, fmt.Errorf("the bound is not a number: write >0, >=1, <=1 or <100")
			}
			return o, bound, nil
		}
	}
	return "", 0, fmt.Errorf("write a comparison and a number: >0, >=1, <=1 or <100")
}

func (fv fieldValue) String() string {
	if fv.f == nil {
		return ""
	}
	return fv.f.String()
}

func (fv fieldValue) Set(s string) error {
	if err := fv.f.set(s); err != nil {
		return fv.f.hinted(err, s)
	}
	return nil
}

// hinted adds to err what a Lightning user types instead of value, for a
// trainer flag whose Lightning argument takes it.
func (f *field) hinted(err error, value string) error {
	if f.group != "trainer" {
		return err
	}
	if h := lightningValueHint(f.name, value); h != "" {
		return fmt.Errorf("%w; %s", err, h)
	}
	return err
}

func (fv fieldValue) IsBoolFlag() bool { return fv.f != nil && fv.f.boolean }

func (fv fieldValue) Get() any {
	if fv.f.v.Type() == durationType {
		return fv.f.String()
	}
	if fv.f.v.Kind() == reflect.Slice {
		return fv.f.String()
	}
	return fv.f.v.Interface()
}

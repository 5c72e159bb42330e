package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// A config file holds the flags by section, as LightningCLI's does, in
// YAML or JSON (a JSON file is YAML too); keys are the flags' names with
// '-' or '_':
//
//	trainer:
//	  max_epochs: 3
//	  strategy: ddp
//	model:
//	  lr: 0.01
//	data:
//	  batch_size: 128
//
// -print-config writes the settings of a command line in this form.
// sigs.k8s.io/yaml reads it: it turns YAML into JSON and decodes that with
// encoding/json, so a file means the same whether written in YAML or JSON
// (no YAML-only types), and it is what Kubernetes tooling uses.

// applyConfig sets every flag the file names that the command line did not.
func applyConfig(path string, p *parsed) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-config %s: %w", path, err)
	}
	if _, err := yaml.YAMLToJSON(raw); err != nil {
		return fmt.Errorf("-config %s: not YAML or JSON: %w", path, err)
	}
	// Strict: a section or a setting written twice is an error, where the
	// lenient reading kept the last one without a word.
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return fmt.Errorf("-config %s: %w: write each section and each setting once", path, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return fmt.Errorf("-config %s: want sections trainer:, model: and data: holding flag: value pairs: %w", path, err)
	}
	sections := map[string][]*field{}
	for _, g := range p.groups {
		sections[g.name] = g.fields
	}
	secNames := make([]string, 0, len(top))
	for k := range top {
		secNames = append(secNames, k)
	}
	sort.Strings(secNames)
	doc := map[string]map[string]any{}
	for _, sec := range secNames {
		var pairs map[string]any
		dec := json.NewDecoder(bytes.NewReader(top[sec]))
		dec.UseNumber()
		if err := dec.Decode(&pairs); err != nil {
			if f := p.byName[strings.ReplaceAll(sec, "_", "-")]; f != nil {
				g := groupOf(p.groups, f)
				return fmt.Errorf("-config %s: %s is at the top level: settings go under their section, here %s: (%s: {%s: %s})", path, sec, g, g, sec, top[sec])
			}
			if r, ok := lightningNames[strings.ReplaceAll(sec, "_", "-")]; ok && p.byName[r.flag] != nil {
				g, name := groupOf(p.groups, p.byName[r.flag]), strings.ReplaceAll(r.flag, "-", "_")
				return fmt.Errorf("-config %s: %s: Lightning's %s is %s here, under %s: (%s: {%s: %s})", path, sec, sec, name, g, g, name, top[sec])
			}
			if fields := sections[sec]; len(fields) > 0 {
				return fmt.Errorf("-config %s: section %s: holds %s: want flag: value pairs, such as %s: {%s: ...}", path, sec, top[sec], sec, strings.ReplaceAll(fields[0].name, "-", "_"))
			}
		}
		doc[sec] = pairs
	}
	// max_steps and max-steps name one flag: the strict reading sees two
	// keys, so the second is caught here.
	setBy := map[string]string{}
	for _, sec := range secNames {
		fields, ok := sections[sec]
		if !ok {
			return fmt.Errorf("-config %s: unknown section %q: use trainer:, model: and data:", path, sec)
		}
		keys := make([]string, 0, len(doc[sec]))
		for k := range doc[sec] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			name := strings.ReplaceAll(key, "_", "-")
			f := p.byName[name]
			if f == nil || !contains(fields, f) {
				if f != nil {
					return fmt.Errorf("-config %s: %s.%s is a %s setting: move it under %s:", path, sec, key, groupOf(p.groups, f), groupOf(p.groups, f))
				}
				if hint := configHint(p.fs, key); hint != "" {
					return fmt.Errorf("-config %s: %s.%s is not a flag of this program: %s", path, sec, key, hint)
				}
				return fmt.Errorf("-config %s: %s.%s is not a flag of this program: the %s settings are %s", path, sec, key, sec, fieldNames(fields))
			}
			if prev, ok := setBy[name]; ok {
				return fmt.Errorf("-config %s: %s.%s and %s.%s are both -%s: write it once", path, sec, prev, sec, key, name)
			}
			setBy[name] = key
			if p.set[name] {
				continue // the command line wins
			}
			val, err := configString(doc[sec][key])
			if err != nil {
				return fmt.Errorf("-config %s: %s.%s: %w", path, sec, key, err)
			}
			if err := p.fs.Set(name, val); err != nil {
				return fmt.Errorf("-config %s: %s.%s is %q: %w", path, sec, key, val, err)
			}
			p.set[name] = true
		}
	}
	return nil
}

func contains(fields []*field, f *field) bool {
	for _, x := range fields {
		if x == f {
			return true
		}
	}
	return false
}

func fieldNames(fields []*field) string {
	if len(fields) == 0 {
		return "none"
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = strings.ReplaceAll(f.name, "-", "_")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// configString writes a decoded value the way the flag's Set reads it.
func configString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return fmt.Sprint(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := configString(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", fmt.Errorf("the value is empty: give one, or delete the line")
	}
	return "", fmt.Errorf("the value %v is a %T: give a string, a number, a bool or a list", v, v)
}

// printConfig writes the settings as a config file that -config reads back.
// A link's target that was not set (followers) is left out, with a comment
// saying so, as LightningCLI leaves link targets out: written, it would
// count as set when read back, and stop following its source (a file
// printed with -max-epochs 1, read back with -max-epochs 10, would keep
// -cosine-epochs at 1).
func printConfig(w io.Writer, groups []group, followers map[string]string) error {
	doc := map[string]map[string]any{}
	var notes []string
	for _, g := range groups {
		sec := map[string]any{}
		for _, f := range g.fields {
			if from, ok := followers[f.name]; ok {
				notes = append(notes, fmt.Sprintf("# %s.%s is left out: it takes the value of %s unless set", g.name, strings.ReplaceAll(f.name, "-", "_"), strings.ReplaceAll(from, "-", "_")))
				continue
			}
			var v any = f.String()
			if fl, ok := any(fieldValue{f}).(flag.Getter); ok {
				v = fl.Get()
			}
			if c, ok := f.v.Addr().Interface().(*Count); ok {
				v = int(*c)
			}
			sec[strings.ReplaceAll(f.name, "-", "_")] = v
		}
		if len(sec) > 0 {
			doc[g.name] = sec
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	for _, n := range notes {
		b = append(b, n+"\n"...)
	}
	_, err = w.Write(b)
	return err
}

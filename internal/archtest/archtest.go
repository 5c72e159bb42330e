package archtest

import (
	"bufio"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A Rule forbids the packages matched by From (less those matched by
// Unless) to import what Forbid matches (less what Allow matches).
//
// Patterns are module-relative package paths ("strategy/collective") or, for
// packages outside the module, full import paths ("net"). A pattern ending in
// "/..." also matches every package below; "*" matches one path element, and
// "$1" in Allow stands for what the first "*" of From matched.
type Rule struct {
	From, Unless  []string
	Forbid, Allow []string
	Says          string // the rule in words
	Doc           string // where it is written
}

// An Exemption lets one package keep one import that breaks a rule until
// the change named in Reason lands.
type Exemption struct {
	From, Import string
	Reason       string
}

// A Violation is an import that breaks a rule.
type Violation struct {
	From, Import string
	Rule         *Rule
}

func (v Violation) String() string {
	return fmt.Sprintf("%s imports %s: %s (%s)", v.From, v.Import, v.Rule.Says, v.Rule.Doc)
}

// Graph maps each package of the module (module-relative path) to its
// imports (module-relative for the module's packages, full otherwise).
type Graph map[string][]string

// Check returns every import of g that breaks a rule, sorted; an import
// breaking two rules is reported under each.
func Check(g Graph, rules []Rule) []Violation {
	var out []Violation
	for i := range rules {
		r := &rules[i]
		for pkg, imps := range g {
			capture, ok := matchAny(r.From, pkg)
			if !ok {
				continue
			}
			if _, skip := matchAny(r.Unless, pkg); skip {
				continue
			}
			allow := make([]string, len(r.Allow))
			for j, a := range r.Allow {
				allow[j] = strings.ReplaceAll(a, "$1", capture)
			}
			for _, imp := range imps {
				if _, bad := matchAny(r.Forbid, imp); !bad {
					continue
				}
				if _, ok := matchAny(allow, imp); ok {
					continue
				}
				out = append(out, Violation{From: pkg, Import: imp, Rule: r})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		if out[i].Import != out[j].Import {
			return out[i].Import < out[j].Import
		}
		return out[i].Rule.Says < out[j].Rule.Says
	})
	return out
}

// Exempt splits vs into those no exemption covers and the exemptions that
// cover none (stale: the import is gone, so the exemption must go too).
func Exempt(vs []Violation, ex []Exemption) (left []Violation, stale []Exemption) {
	used := make([]bool, len(ex))
	for _, v := range vs {
		covered := false
		for i, e := range ex {
			if e.From == v.From && e.Import == v.Import {
				used[i], covered = true, true
			}
		}
		if !covered {
			left = append(left, v)
		}
	}
	for i, e := range ex {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	return left, stale
}

// matchAny reports whether one of patterns matches p, and what that
// pattern's first "*" matched.
func matchAny(patterns []string, p string) (string, bool) {
	for _, pat := range patterns {
		if c, ok := match(pat, p); ok {
			return c, true
		}
	}
	return "", false
}

func match(pat, p string) (string, bool) {
	below := strings.HasSuffix(pat, "/...")
	pat = strings.TrimSuffix(pat, "/...")
	want, got := strings.Split(pat, "/"), strings.Split(p, "/")
	if len(got) < len(want) || (!below && len(got) != len(want)) {
		return "", false
	}
	capture, captured := "", false
	for i, w := range want {
		if w == "*" {
			if !captured {
				capture, captured = got[i], true
			}
			continue
		}
		if w != got[i] {
			return "", false
		}
	}
	return capture, true
}

// Load reads the import graph of the module rooted at root from its source:
// every directory with .go files is a package, every non-test .go file
// counts whatever its build constraints (so cgo, mpi and cuda files are
// checked too). Test files are left out: a test may import what its package
// must not (shm's tests build the TCP ring to compare with). testdata,
// hidden directories and nested modules are skipped.
func Load(root string) (Graph, error) {
	mod, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	g := Graph{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if _, ok := g[pkg]; !ok {
			g[pkg] = nil
		}
		for _, s := range f.Imports {
			imp, err := strconv.Unquote(s.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", p, s.Path.Value, err)
			}
			if imp == "C" {
				continue
			}
			if imp == mod {
				imp = "."
			} else if strings.HasPrefix(imp, mod+"/") {
				imp = strings.TrimPrefix(imp, mod+"/")
			}
			if !contains(g[pkg], imp) {
				g[pkg] = append(g[pkg], imp)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, imps := range g {
		sort.Strings(imps)
	}
	return g, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// modulePath reads the module line of a go.mod file.
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", errors.New(gomod + ": no module line")
}

// ModuleRoot finds the directory holding go.mod at or above dir.
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod at or above the test's directory")
		}
		dir = up
	}
}

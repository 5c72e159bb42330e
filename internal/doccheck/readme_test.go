package doccheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	dotPath  = regexp.MustCompile(`(?:^|\s)\./([A-Za-z0-9_.\-/]+)`)
	fence    = regexp.MustCompile("(?s)```.*?```")
	mdName   = regexp.MustCompile(`^[A-Z][A-Z_]*\.md$`)
)

// mentions returns the repository paths a markdown document names: link
// targets, ./paths in commands, code spans whose first element is a
// top-level entry of the repository, and upper-case markdown file names
// (README.md, DESIGN.md). Run outputs (metrics.csv, checkpoints/last.ckpt)
// start with no top-level entry and are left out.
func mentions(doc string, top map[string]bool) []string {
	var out []string
	for _, m := range link.FindAllStringSubmatch(doc, -1) {
		if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "#") && !strings.HasPrefix(m[1], "mailto:") {
			out = append(out, strings.SplitN(m[1], "#", 2)[0])
		}
	}
	for _, m := range dotPath.FindAllStringSubmatch(doc, -1) {
		if p := strings.TrimRight(m[1], "."); top[strings.SplitN(p, "/", 2)[0]] {
			out = append(out, p) // ./mlp, a program built from examples/mlp, is not a path
		}
	}
	// Fenced blocks would pair their backticks with the spans'.
	prose := fence.ReplaceAllString(doc, "")
	for _, m := range codeSpan.FindAllStringSubmatch(prose, -1) {
		s := m[1]
		if strings.ContainsAny(s, " *|<>$=") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "-") {
			continue
		}
		first := strings.SplitN(s, "/", 2)[0]
		if (strings.Contains(s, "/") && top[first]) || mdName.MatchString(s) {
			out = append(out, s)
		}
	}
	return out
}

func TestReadmesNameOnlyFilesInTheRepository(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, e := range ents {
		top[e.Name()] = true
	}
	docs := []string{"README.md", filepath.Join("deploy", "README.md")}
	checked := 0
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range mentions(string(b), top) {
			checked++
			// A path is relative to the repository root or to the document.
			if _, err := os.Stat(filepath.Join(root, p)); err == nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(d), p)); err == nil {
				continue
			}
			t.Errorf("%s names %q, which is not in the repository", d, p)
		}
	}
	if checked < 10 {
		t.Errorf("only %d paths found in %v: the extraction is broken", checked, docs)
	}
}

func TestMentionsFindsPaths(t *testing.T) {
	top := map[string]bool{"bench": true, "examples": true}
	doc := "```\nrun `x\n```\nsee `bench/RESULTS.md`, `DESIGN.md`, `metrics.csv`, `checkpoints/last.ckpt`, [x](deploy/a.md), [y](https://e.org/a), `./mlp -devices 2` and `go run ./examples/mlp -devices 2`."
	got := strings.Join(mentions(doc, top), " ")
	want := "deploy/a.md examples/mlp bench/RESULTS.md DESIGN.md"
	if got != want {
		t.Errorf("mentions = %q, want %q", got, want)
	}
}

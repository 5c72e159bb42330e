// Package archtest is the architecture test: `go test ./...` fails on any
// import that breaks the layering written in DESIGN.md's "Layers" section
// and the packages' doc.go.
//
// Rules (rules.go) is the one table of that layering, as imports a package
// must not make; each violation names the importing package, the forbidden
// import, the rule and the document it comes from. Load reads the module's
// import graph from source with go/parser (every non-test file, whatever its
// build tags, so mpi, cuda and cgo files are checked too); Check applies the
// rules. The test's Exemptions list the imports that break the target
// layering today, each with the change that removes it; an exemption that no
// longer covers an import fails the test too.
//
// archtest imports only the standard library and nothing of fulgur.
package archtest

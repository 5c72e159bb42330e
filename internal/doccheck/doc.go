// Package doccheck holds tests of the repository's documents: every file a
// README names exists in the repository. It has no code of its own and
// imports nothing of fulgur.
package doccheck

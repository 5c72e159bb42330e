//go:build !race

package ops

const raceBuild = false

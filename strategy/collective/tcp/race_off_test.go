//go:build !race

package tcp_test

const raceBuild = false

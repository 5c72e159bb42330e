//go:build !linux

package cluster

// namespaces is Linux's: elsewhere the host name and boot id stand alone.
func namespaces() string { return "" }

//go:build linux

package nccl_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/fulgur-ml/fulgur/strategy/collective/nccl"
)

var tempDirs []string

func osMkdirTemp() (string, error) {
	d, err := os.MkdirTemp("", "fulgur-nccl-standin")
	if err == nil {
		tempDirs = append(tempDirs, d)
	}
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func ExampleAvailable() {
	err := nccl.Available(nccl.Config{NCCLPath: "libnccl-not-installed.so.2"})
	fmt.Println(errors.Is(err, nccl.ErrUnavailable))
	// Output: true
}

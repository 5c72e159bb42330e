package main

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Another program that binds the ranks' rendezvous port between its
// choice and the ranks' start cannot fail the run: the launcher holds the
// port until rank 0 has it.
func TestRendezvousPortCannotBeTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two ranks as processes")
	}
	var taken net.Listener
	var takeErr error
	portChosen = func(port int) {
		taken, takeErr = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	defer func() { portChosen = nil }()
	o, err := parseOptions([]string{"-workload", "allreduce", "-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Workload: "allreduce", Impl: "fulgur", Variant: "backend=tcp bytes=1024", Ranks: 2, Steps: 2, Seed: 1}
	f, err := measure(context.Background(), o, c)
	if taken != nil {
		taken.Close()
	}
	if err != nil {
		t.Fatalf("a port taken before the ranks started failed the run: %v", err)
	}
	if !errors.Is(takeErr, syscall.EADDRINUSE) {
		t.Errorf("binding the chosen port before the ranks start: %v, want address already in use (the launcher holds it)", takeErr)
	}
	if f["ms"] <= 0 || f["bytes"] != 1024 {
		t.Errorf("figures %v, want 1024 bytes timed", f)
	}
}

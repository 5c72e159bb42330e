package main

import "os"

// killSelf ends this process at once, as a crash would (SIGKILL on unix,
// TerminateProcess on Windows).
func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill()
	}
}

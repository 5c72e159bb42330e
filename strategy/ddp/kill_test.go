package ddp_test

import "os"

// kill ends process pid at once (SIGKILL on unix, TerminateProcess on
// Windows): a rank that crashes, or one a test leaves behind.
func kill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

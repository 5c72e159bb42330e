package ddp_test

// stopSelf would stop this process as SIGSTOP does (a rank that hangs):
// Windows has no such signal, so the tests of a hung rank hold on unix
// only.
func stopSelf() { panic("a rank that hangs is stopped by SIGSTOP, which Windows does not have") }

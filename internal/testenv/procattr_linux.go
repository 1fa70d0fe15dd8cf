package testenv

import "syscall"

// ServerAttr is the process attributes of a server a test starts: a group
// of its own (a kill reaches its children), and killed when the test
// process dies, however it dies (a timeout, a signal), so that no server
// outlives its test.
func ServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

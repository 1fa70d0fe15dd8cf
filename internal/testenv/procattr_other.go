//go:build unix && !linux

package testenv

import "syscall"

// ServerAttr is the process attributes of a server a test starts: a group
// of its own (a kill reaches its children). Only Linux can also kill it
// with the test process; elsewhere a test killed from outside leaves its
// servers running.
func ServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

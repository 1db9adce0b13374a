package nats_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes a server or engine the test starts die with the test
// binary: a run cut short (a go test timeout, a killed CI job) must not leave
// nats-servers holding ports and stores behind.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

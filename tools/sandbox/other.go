//go:build !linux

package sandbox

import (
	"os"
	"syscall"
)

// Main marks the program as ready for New; off Linux there are no helpers.
func Main() {
	switch os.Args[0] {
	case initName:
		os.Exit(125)
	}
	mainCalled.Store(true)
}

func initProcAttr() *syscall.SysProcAttr { return nil }

func plainProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// probeKernel: off Linux, nothing the sandbox needs is there.
func probeKernel() Support { return Support{} }

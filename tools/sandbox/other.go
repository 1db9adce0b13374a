//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"syscall"

	"github.com/noeta-go/noeta/internal/sandboxinit"
)

func initProcAttr() *syscall.SysProcAttr { return nil }

func plainProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// probeKernel: off Linux, nothing the sandbox needs is there.
func probeKernel() Support { return Support{} }

func seccompFilter() ([]sandboxinit.Insn, error) { return nil, errors.New("no seccomp off Linux") }

func specSocket() (mine, child *os.File, err error) {
	return nil, nil, errors.New("sandbox: no helper off Linux")
}

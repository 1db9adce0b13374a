package sandbox

import (
	"fmt"
	"os"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// initProcAttr starts the sandbox's first process in new user, PID, mount,
// IPC, UTS and network namespaces. The engine's uid and gid are mapped to 0
// inside, the only mapping an unprivileged process may write, which gives
// the first process the capabilities it needs in its namespaces (mount a
// /proc, bring up its loopback) and none outside them; it
// drops them all before the tool runs. The first process leads a process
// group of its own and gets SIGKILL when the engine's thread that started
// it ends: as the PID namespace's init, its death ends everything in it.
func initProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Setpgid:                    true,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

func plainProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// probeKernel reads what the kernel offers without starting anything.
func probeKernel() Support {
	var s Support
	if v, err := ll.LandlockGetABIVersion(); err == nil {
		s.LandlockABI = v
	}
	// PR_GET_SECCOMP fails with EINVAL on a kernel without seccomp.
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == nil {
		s.Seccomp = true
	}
	_, err := os.Stat("/proc/self/ns/user")
	s.UserNamespaces = err == nil
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && len(b) > 0 && b[0] == '0' && os.Geteuid() != 0 {
		s.UserNamespaces = false
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && len(b) > 0 && b[0] == '0' {
		s.UserNamespaces = false
	}
	return s
}

// specSocket is a connected pair for the spec: the engine's end (on the
// runtime's poller, so that sending has a deadline) and the helper's.
func specSocket() (mine, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: spec socket: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		_ = unix.Close(fds[0])
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("sandbox: spec socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "spec"), os.NewFile(uintptr(fds[1]), "spec"), nil
}

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// rulesetFD builds the Landlock ruleset: the workspace and the policy's
// write paths read-write, the system's program and library directories,
// the policy's read paths and this namespace's /proc read-only, nothing
// else. Signals and abstract Unix sockets are scoped to the sandbox where
// the kernel can (ABI 6).
func rulesetFD(w Wire) (int, uint32, error) {
	cfg := landlock.Config{HandledAccessFS: landlock.V7.HandledAccessFS, Scoped: landlock.V7.Scoped}.BestEffort()
	rules := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.RODirs("/proc").IgnoreIfMissing(),
		landlock.RWFiles(devices...).IgnoreIfMissing(),
		landlock.RWDirs(w.Dir).WithRefer(),
	}
	rules = append(rules, pathRules(systemEtc, false)...)
	rules = append(rules, pathRules(w.Read, false)...)
	rules = append(rules, pathRules(w.Write, true)...)
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err == nil && fd < 0 {
		err = fmt.Errorf("the kernel has no Landlock")
	}
	return fd, flags, err
}

// pathRules turns paths into read-only (or, with write, read-write) rules,
// as directory or file rules by what each is; a missing path grants
// nothing.
func pathRules(paths []string, write bool) []landlock.Rule {
	var rules []landlock.Rule
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		switch {
		case write && fi.IsDir():
			rules = append(rules, landlock.RWDirs(p).WithRefer().IgnoreIfMissing())
		case write:
			rules = append(rules, landlock.RWFiles(p).IgnoreIfMissing())
		case fi.IsDir():
			rules = append(rules, landlock.RODirs(p).IgnoreIfMissing())
		default:
			rules = append(rules, landlock.ROFiles(p).IgnoreIfMissing())
		}
	}
	return rules
}

// loadSeccomp installs the filter on every thread of the process
// (no_new_privs is set already).
func loadSeccomp(raw []Insn) error {
	if len(raw) == 0 {
		return errors.New("the spec carries no seccomp filter")
	}
	filter := make([]syscall.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = syscall.SockFilter{Code: r.Code, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := syscall.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return errno
	}
	return nil
}

package sandbox

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// systemDirs are the program and library directories a tool may read and
// execute.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemEtc is what of /etc a tool may read: what the dynamic loader, the
// C library's name service, TLS clients and Debian's alternatives need.
// Not /etc as a whole: it holds the host's secrets too (shadow, ssh host
// keys, whatever an operator put there).
var systemEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
	"/etc/localtime", "/etc/timezone", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
	"/etc/hosts", "/etc/host.conf", "/etc/services", "/etc/protocols", "/etc/mime.types",
	"/etc/inputrc", "/etc/bash.bashrc", "/etc/profile", "/etc/terminfo", "/etc/magic",
}

// devices are the device files a tool may read and write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// rulesetFD builds the Landlock ruleset: the workspace and the policy's
// write paths read-write, the system's program and library directories,
// the policy's read paths and this namespace's /proc read-only, nothing
// else. Signals and abstract Unix sockets are scoped to the sandbox where
// the kernel can (ABI 6).
func rulesetFD(w wire) (int, uint32, error) {
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

// deniedSyscalls are what a tool never needs and what reaches into other
// processes or the kernel's configuration: debugging and memory of other
// processes, mounts and namespaces, keyrings, BPF, performance counters,
// kernel modules and kexec, clocks, swap, reboot, accounting, and the
// io_uring interface, whose operations a seccomp filter does not see, and
// anonymous memory files.
// They fail with EPERM.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"open_by_handle_at", "name_to_handle_at",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	// Memory a tree could hold outside the resident memory the first
	// process counts.
	"memfd_create", "memfd_secret",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"iopl", "ioperm", "uselib", "personality",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

const errnoEPERM = seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
const errnoENOSYS = seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))

// seccompFilter assembles the filter: the denied calls fail with EPERM; a
// clone that asks for a new user namespace too; clone3, whose flags a
// filter cannot read, fails with ENOSYS so that the C library falls back
// to clone; and a call made through another architecture's interface
// (32-bit x86 on x86-64, which numbers calls differently) kills the
// process, since a deny list read by one numbering would not hold for the
// other.
func seccompFilter() ([]bpf.RawInstruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	p := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: deniedSyscalls, Action: errnoEPERM},
			{NamesWithCondtions: []seccomp.NameWithConditions{{Name: "clone", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER},
			}}}, Action: errnoEPERM},
			{Names: []string{"clone3"}, Action: errnoENOSYS},
		},
	}
	insts, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	const archOffset = 4 // offsetof(struct seccomp_data, arch)
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}, insts...)
	return bpf.Assemble(prog)
}

// loadSeccomp installs the filter on every thread of the process
// (no_new_privs is set already).
func loadSeccomp(raw []bpf.RawInstruction) error {
	filter := make([]syscall.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = syscall.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := syscall.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return errno
	}
	return nil
}

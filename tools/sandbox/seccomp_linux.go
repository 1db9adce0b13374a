package sandbox

import (
	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/noeta-go/noeta/internal/sandboxinit"
)

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
func seccompFilter() ([]sandboxinit.Insn, error) {
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
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]sandboxinit.Insn, len(raw))
	for i, r := range raw {
		out[i] = sandboxinit.Insn{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

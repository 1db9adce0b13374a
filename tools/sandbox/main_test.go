package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// TestMain hands over to the sandbox's helpers, and to the probe: the test
// binary run inside a sandbox as "probe <what> <arg>", an attack the shell
// cannot make by itself.
func TestMain(m *testing.M) {
	sandbox.Main()
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probe(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// probe makes one attempt and exits 0 if it worked, 1 (saying why) if not.
func probe(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "probe: want <what> <arg>")
		return 2
	}
	what, arg := args[0], args[1]
	var err error
	switch what {
	case "connect":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", arg, 2*time.Second); err == nil {
			c.Close()
		}
	case "ptrace", "vmread", "kill":
		pid, _ := strconv.Atoi(arg)
		switch what {
		case "ptrace":
			err = unix.PtraceAttach(pid)
		case "vmread":
			buf := make([]byte, 8)
			_, err = unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: 8}},
				[]unix.RemoteIovec{{Base: 0x400000, Len: 8}}, 0)
		case "kill":
			err = unix.Kill(pid, unix.SIGTERM)
		}
	case "unix":
		var c net.Conn
		if c, err = net.DialTimeout("unix", arg, 2*time.Second); err == nil {
			c.Close()
		}
	case "status":
		// The first process's status pipe, forged through /proc.
		var f *os.File
		if f, err = os.OpenFile("/proc/1/fd/4", os.O_WRONLY, 0); err == nil {
			_, err = f.WriteString(arg + "\n")
			f.Close()
		}
	case "memfd":
		_, err = unix.MemfdCreate("x", 0)
	case "unshare":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "mount":
		err = unix.Mount("tmpfs", arg, "tmpfs", 0, "")
	default:
		err = fmt.Errorf("unknown probe %q", what)
	}
	if err != nil {
		fmt.Println("refused:", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

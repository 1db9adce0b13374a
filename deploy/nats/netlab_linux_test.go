//go:build linux

package nats_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// netLab is a private network on one machine: a bridge in a network
// namespace of its own, and members, each in its own namespace with one
// veth (eth0) whose peer is a port of the bridge. Nothing of it is in the
// host's namespace, so nothing it does reaches the host's network, and two
// labs (parallel runs) never see each other: the names carry the test
// binary's pid and a random suffix, and a lab whose binary is gone is
// removed by the next one that starts.
//
// Faults are set per member on its own side: an nftables table that drops
// what arrives from some members (a partition, one way or both) or a share
// of everything (packet loss), and a qdisc on eth0's egress (latency and
// jitter with netem where the kernel has it, a slow link with tbf where it
// has not).
type netLab struct {
	id      string
	bridge  string // the bridge's namespace
	members map[string]*labMember
	order   []string
	netem   bool // the kernel has sch_netem

	mu     sync.Mutex
	slowed map[string]bool // members with a fault qdisc, which a heal removes
}

type labMember struct {
	name string
	ns   string // namespace name under /run/netns
	ip   net.IP
	fd   *os.File // the namespace, open, for setns and nftables
}

// labPrefix starts every namespace a lab creates.
const labPrefix = "nzp"

// netLabUnavailable says why no lab can be built here, or "".
func netLabUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces, veths and nftables need CAP_NET_ADMIN"
	}
	for _, bin := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " (iproute2) not found: " + err.Error()
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "no network namespaces: " + err.Error()
	}
	return ""
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// reapStaleLabs removes namespaces of labs whose test binary has exited (a
// run killed before its cleanup).
func reapStaleLabs() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), labPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = ipCmd("netns", "del", e.Name())
		}
	}
}

// newNetLab builds a lab with the named members on 10.77.0.0/24, in order
// from 10.77.0.1. The test's cleanup removes every namespace (and with them
// the veths and the bridge), failed or not.
func newNetLab(t testing.TB, names []string) *netLab {
	t.Helper()
	reapStaleLabs()
	lab := &netLab{id: fmt.Sprintf("%s%d-%04x", labPrefix, os.Getpid(), rand.N(1<<16)), members: map[string]*labMember{}, slowed: map[string]bool{}}
	lab.bridge = lab.id + "-br"
	var created []string
	t.Cleanup(func() {
		for _, m := range lab.members {
			_ = m.fd.Close()
		}
		for _, ns := range created {
			if err := ipCmd("netns", "del", ns); err != nil {
				t.Logf("lab cleanup: %v", err)
			}
		}
	})
	must := func(args ...string) {
		t.Helper()
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("netns", "add", lab.bridge)
	created = append(created, lab.bridge)
	must("-n", lab.bridge, "link", "add", "br0", "type", "bridge")
	must("-n", lab.bridge, "link", "set", "br0", "up")
	for i, name := range names {
		m := &labMember{name: name, ns: lab.id + "-" + name, ip: net.IPv4(10, 77, 0, byte(i+1)).To4()}
		must("netns", "add", m.ns)
		created = append(created, m.ns)
		port := fmt.Sprintf("p%d", i+1)
		// Created in the namespaces directly: no name ever exists in the
		// host's namespace, where two runs could collide.
		must("-n", m.ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", lab.bridge)
		must("-n", lab.bridge, "link", "set", port, "master", "br0", "up")
		must("-n", m.ns, "addr", "add", m.ip.String()+"/24", "dev", "eth0")
		must("-n", m.ns, "link", "set", "eth0", "up")
		must("-n", m.ns, "link", "set", "lo", "up")
		fd, err := os.Open("/run/netns/" + m.ns)
		if err != nil {
			t.Fatal(err)
		}
		m.fd = fd
		lab.members[name] = m
		lab.order = append(lab.order, name)
	}
	// Probe netem once: a kernel built without it (CONFIG_NET_SCH_NETEM)
	// gets the slow-link form of the latency fault.
	probe := lab.members[names[0]]
	if out, err := exec.Command("ip", "netns", "exec", probe.ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms").CombinedOutput(); err == nil {
		lab.netem = true
		_ = exec.Command("ip", "netns", "exec", probe.ns, "tc", "qdisc", "del", "dev", "eth0", "root").Run()
	} else {
		t.Logf("NOTICE: tc netem is not available in this kernel (%s): latency faults are a tbf slow link (queueing delay and tail drops) instead of netem delay and jitter",
			strings.TrimSpace(string(out)))
	}
	return lab
}

func (l *netLab) member(name string) *labMember {
	m, ok := l.members[name]
	if !ok {
		panic("no lab member " + name)
	}
	return m
}

// wrap returns the argv prefix that runs a program in the member's
// namespace. ip netns exec execs the program itself: the pid the test holds
// is the program's, for signals.
func (m *labMember) wrap() []string { return []string{"ip", "netns", "exec", m.ns} }

// inNS runs f on an OS thread switched into the member's namespace; sockets
// f creates belong to that namespace for their life. The thread goes back to
// the test's namespace after, and is thrown away if it cannot.
func (m *labMember) inNS(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(m.fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", m.ns, err)
			return // locked: the runtime ends the thread with the goroutine
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Dial implements nats.CustomDialer: a connection from the member's
// namespace.
func (m *labMember) Dial(network, address string) (net.Conn, error) {
	return m.DialContext(context.Background(), network, address)
}

func (m *labMember) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := m.inNS(func() error {
		var err error
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// httpClient is an HTTP client whose connections start in the member's
// namespace.
func (m *labMember) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: m.DialContext, DisableKeepAlives: true}}
}

// netFault is what one member's side of the network does to it: drop what
// arrives from some members, drop a share of everything, and delay or
// throttle what it sends.
type netFault struct {
	dropFrom map[string]bool
	lossPct  int
	slow     bool
}

// apply sets every member's faults to faults (a member absent from it has
// none): the whole state at once, so a heal is apply(nil).
func (l *netLab) apply(faults map[string]netFault) error {
	var errs []error
	for _, name := range l.order {
		m := l.members[name]
		f := faults[name]
		var from []net.IP
		for other := range f.dropFrom {
			from = append(from, l.member(other).ip)
		}
		if err := m.setFilter(from, f.lossPct); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if err := l.setQdisc(m, f.slow); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// setFilter replaces the member's fault table: an input chain dropping the
// packets from each address of from, and lossPct percent of the rest that
// arrive on eth0.
func (m *labMember) setFilter(from []net.IP, lossPct int) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(m.fd.Fd())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	c.FlushRuleset() // the namespace is the lab's own: its only table is this one
	if len(from) == 0 && lossPct == 0 {
		return c.Flush()
	}
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "fault"})
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "in", Table: tab, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policy})
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, "eth0")
	onEth0 := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
	}
	for _, ip := range from {
		c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: append(append([]expr.Any{}, onEth0...),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.To4()},
			&expr.Verdict{Kind: expr.VerdictDrop},
		)})
	}
	if lossPct > 0 {
		// numgen yields a host-order word; nft compares in network order,
		// so it is converted first (as nft itself does for "numgen ... < n").
		lim := make([]byte, 4)
		binary.BigEndian.PutUint32(lim, uint32(lossPct))
		c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: append(append([]expr.Any{}, onEth0...),
			&expr.Numgen{Register: 1, Modulus: 100, Type: unix.NFT_NG_RANDOM},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Cmp{Op: expr.CmpOpLt, Register: 1, Data: lim},
			&expr.Verdict{Kind: expr.VerdictDrop},
		)})
	}
	return c.Flush()
}

func (l *netLab) setQdisc(m *labMember, slow bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slow {
		if !l.slowed[m.name] {
			return nil
		}
		delete(l.slowed, m.name)
		return tcIn(m, "qdisc", "del", "dev", "eth0", "root")
	}
	var spec []string
	if l.netem {
		spec = []string{"netem", "delay", "150ms", "100ms", "distribution", "normal"}
	} else {
		// A link of 512 kbit/s: a burst queues up to 300 ms and the rest is
		// dropped at the tail, as on a congested link.
		spec = []string{"tbf", "rate", "512kbit", "burst", "8kb", "latency", "300ms"}
	}
	l.slowed[m.name] = true
	return tcIn(m, append([]string{"qdisc", "replace", "dev", "eth0", "root"}, spec...)...)
}

func tcIn(m *labMember, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", m.ns, "tc"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

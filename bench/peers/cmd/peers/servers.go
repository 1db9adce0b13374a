package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// temporalVersion is the server the harness builds: the newest whose go.mod
// the Go toolchain here (1.26.8) builds; later patch versions want 1.26.10.
const temporalVersion = "v1.32.0"

// temporalAddr is the frontend of development-sqlite-file.yaml.
const temporalAddr = "127.0.0.1:7233"

// server is a process the harness started and stops.
type server struct {
	name string
	cmd  *exec.Cmd
	pid  int
	stop func(ctx context.Context) error
}

// cacheDir is where the built Temporal server is kept between sittings.
func cacheDir() (string, error) {
	if d := os.Getenv("NOETA_PEERS_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	return filepath.Join(d, "noeta-peers"), nil
}

// temporalBinary builds go.temporal.io/server's cmd/server at
// temporalVersion into the cache, unless it is there.
func temporalBinary(ctx context.Context, stderr io.Writer) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "temporal-"+temporalVersion)
	bin := filepath.Join(dir, "server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(stderr, "building go.temporal.io/server/cmd/server@%s into %s (about 10 minutes on two cores)\n", temporalVersion, dir)
	cmd := exec.CommandContext(ctx, "go", "install", "go.temporal.io/server/cmd/server@"+temporalVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build temporal server %s: %w", temporalVersion, err)
	}
	return bin, nil
}

// temporalSource is the directory of go.temporal.io/server@temporalVersion
// in the module cache, downloading it if need be: its config/ holds the
// server's own development-sqlite-file.yaml.
func temporalSource(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "go.temporal.io/server@"+temporalVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download go.temporal.io/server@%s: %w", temporalVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download: %w", err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download go.temporal.io/server@%s: %s", temporalVersion, m.Error)
	}
	return m.Dir, nil
}

// copyFile copies src to dst, making dst's directory.
func copyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}

// portFree fails if something already listens on addr.
func portFree(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is already in use", addr)
	}
	return nil
}

// freePort is a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startTemporal starts bin in dir on config, one of the server's own
// config files: by default development-sqlite-file.yaml
// (SQLite on the file dir/default, WAL, synchronous FULL; every port on
// loopback) and registers the default namespace.
//
// Each of set ("key=value") is added to the server's dynamic config, for a
// run that is not on the defaults.
func startTemporal(ctx context.Context, bin, src, dir, config string, set []string) (*server, error) {
	for _, f := range []string{config, "dynamicconfig/development-sql.yaml"} {
		if err := copyFile(filepath.Join(dir, "config", f), filepath.Join(src, "config", f)); err != nil {
			return nil, err
		}
	}
	if len(set) > 0 {
		f, err := os.OpenFile(filepath.Join(dir, "config", "dynamicconfig", "development-sql.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("temporal dynamic config: %w", err)
		}
		for _, kv := range set {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				f.Close()
				return nil, fmt.Errorf("-temporal-set %q: want key=value", kv)
			}
			fmt.Fprintf(f, "\n%s:\n  - value: %s\n", k, v)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("temporal dynamic config: %w", err)
		}
	}
	for _, p := range []string{"7233", "7234", "7235", "7239", "6933", "6934", "6935", "6939", "7243", "7936", "8000"} {
		if err := portFree("127.0.0.1:" + p); err != nil {
			return nil, fmt.Errorf("temporal's config needs port %s: %w", p, err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, fmt.Errorf("temporal log: %w", err)
	}
	cmd := exec.Command(bin, "--config-file", filepath.Join("config", config), "--allow-no-auth", "start")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }() // owned by s.stop, which waits for it
	s := &server{name: "temporal", cmd: cmd, pid: cmd.Process.Pid}
	s.stop = func(ctx context.Context) error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("temporal server: killed after 30 s")
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := registerNamespace(rctx, temporalAddr); err != nil {
		_ = s.stop(ctx)
		return nil, fmt.Errorf("%w (server log: %s)", err, logf.Name())
	}
	return s, nil
}

// postgresBin is the newest PostgreSQL's bin directory of Debian's layout.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL under /usr/lib/postgresql/*/bin: apt-get install -y postgresql")
}

// asUser runs a command as the postgres (else nobody) user when this
// process is root, which PostgreSQL refuses to run as.
func asUser(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return exec.CommandContext(ctx, name, args...), nil
	}
	u, err := pgUser()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, "runuser", append([]string{"-u", u.Username, "--", name}, args...)...), nil
}

func pgUser() (*user.User, error) {
	for _, n := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(n); err == nil {
			return u, nil
		}
	}
	return nil, errors.New("running as root and neither a postgres nor a nobody user to run PostgreSQL as")
}

// startPostgres makes a cluster in dir (initdb, trust on loopback) and
// starts it on a free loopback port with its socket in dir and every
// durability setting at its default (fsync on, synchronous_commit on). It
// returns the server and a URL for DBOS.
func startPostgres(ctx context.Context, bin, dir string) (*server, string, error) {
	if os.Geteuid() == 0 {
		u, err := pgUser()
		if err != nil {
			return nil, "", err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, "", fmt.Errorf("postgres directory: %w", err)
		}
		// The user must reach dir through its parents.
		if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
			return nil, "", fmt.Errorf("postgres directory: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	run := func(ctx context.Context, name string, args ...string) error {
		cmd, err := asUser(ctx, filepath.Join(bin, name), args...)
		if err != nil {
			return err
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"); err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s", port, dir)
	if err := run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return nil, "", fmt.Errorf("postmaster.pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return nil, "", fmt.Errorf("postmaster.pid: %w", err)
	}
	s := &server{name: "postgres", pid: pid}
	s.stop = func(ctx context.Context) error {
		return run(ctx, "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
	}
	return s, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/noeta_peers?sslmode=disable", port), nil
}

package jshost

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/noeta-go/noeta/internal/boundedio"
)

// The embedded default keeps everything under one data directory, and one
// process at a time may run a server on it: two nats-servers on one store
// corrupt it, and a process that answered an approval on its own server
// while another served the same tasks left the other's audit trail without
// the answer. So the first host takes an exclusive lock on
// <data>/engine.lock for its whole life and writes into it who it is and
// where its server listens; a later host either becomes a client of that
// server (one that runs no tasks) or is refused at once (one that runs
// tasks). See docs/adr/0022.

const (
	lockFile  = "engine.lock"
	credsFile = "credentials.json"
	// holderWait is how long a client waits for a holder that is still
	// starting its server to say where it listens.
	holderWait = 15 * time.Second
	// maxHolderInfo bounds what is read from the lock and credentials
	// files: both are a few hundred bytes.
	maxHolderInfo = 64 << 10
)

// Holder is what the process holding a data directory says of itself.
type Holder struct {
	PID  int    `json:"pid"`
	Verb string `json:"verb"`
	Host string `json:"host,omitempty"`
	// Started is when it took the directory.
	Started time.Time `json:"started"`
	// URL is the embedded server's client URL, once it listens.
	URL string `json:"url,omitempty"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("engine %s (pid %d", h.Verb, h.PID)
	if h.Host != "" {
		s += " on " + h.Host
	}
	if !h.Started.IsZero() {
		s += ", since " + h.Started.Format(time.RFC3339)
	}
	return s + ")"
}

// localCreds are the user and password of a data directory's embedded
// server, generated once and kept in <data>/credentials.json, mode 0600: a
// local user who cannot read the data directory cannot talk to its server.
type localCreds struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// dataLock is a held data directory.
type dataLock struct {
	dir   string
	f     *os.File
	self  Holder
	creds localCreds
}

// BusyError is returned by [Open] for a host that runs tasks on a data
// directory another process holds; it names the holder.
type BusyError struct {
	Dir    string
	Holder Holder
	// Known is false while the holder has not said who it is.
	Known bool
}

func (e *BusyError) Error() string {
	who := "another process (it did not say who)"
	if e.Known {
		who = e.Holder.String()
	}
	return fmt.Sprintf("data directory %s is in use by %s", e.Dir, who)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// checkDataDir refuses a data directory path that cannot be one: a file,
// or a path through a file. A directory that does not exist yet is made.
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return badOption("data directory %s: %v", dir, err)
		}
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return badOption("data directory %s: a parent of it is not a directory", dir)
	case err != nil:
		return badOption("data directory %s: %v", dir, err)
	case !fi.IsDir():
		return badOption("data directory %s is not a directory", dir)
	}
	return nil
}

// lockDataDir takes the data directory for verb, or returns a *BusyError
// naming who has it. The lock is the kernel's (flock): it goes away with
// the process however the process ends, so a crash never leaves a stale
// lock behind.
func lockDataDir(dir, verb string) (*dataLock, error) {
	if err := checkDataDir(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, badOption("data directory %s: %v", dir, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, badOption("data directory %s: %s is not a regular file", dir, f.Name())
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			h, ok := readHolder(dir)
			return nil, &BusyError{Dir: dir, Holder: h, Known: ok}
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	host, _ := os.Hostname()
	l := &dataLock{dir: dir, f: f, self: Holder{PID: os.Getpid(), Verb: verb, Host: host, Started: time.Now().UTC()}}
	if err := l.write(); err != nil {
		l.release()
		return nil, err
	}
	if l.creds, err = loadCreds(dir, true); err != nil {
		l.release()
		return nil, err
	}
	return l, nil
}

// serving records where the embedded server listens, for the clients.
func (l *dataLock) serving(url string) error {
	l.self.URL = url
	return l.write()
}

func (l *dataLock) write() error {
	b, err := json.Marshal(l.self)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", l.f.Name(), err)
	}
	return nil
}

// release gives the data directory up. It is safe on nil and more than once.
func (l *dataLock) release() {
	if l == nil || l.f == nil {
		return
	}
	// Say nothing more about a server that is gone; the next holder
	// rewrites the file anyway.
	_ = l.f.Truncate(0)
	_ = funlock(l.f)
	_ = l.f.Close()
	l.f = nil
}

// readHolder reads what the holder wrote; ok is false while it has written
// nothing readable.
func readHolder(dir string) (Holder, bool) {
	var h Holder
	b, err := readSmall(filepath.Join(dir, lockFile))
	if err != nil || len(b) == 0 {
		return h, false
	}
	if json.Unmarshal(b, &h) != nil {
		return h, false
	}
	return h, h.PID > 0
}

// readSmall reads a regular file of at most maxHolderInfo bytes (a FIFO or
// a device put in its place is refused, not waited on).
func readSmall(path string) ([]byte, error) {
	return boundedio.ReadFile(context.Background(), path, maxHolderInfo)
}

// loadCreds reads the data directory's credentials, creating them when
// create is set and there are none. A credentials file that others may read
// is refused, not silently repaired: whoever could read it could have used
// it.
func loadCreds(dir string, create bool) (localCreds, error) {
	path := filepath.Join(dir, credsFile)
	var c localCreds
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		return newCreds(path)
	case err != nil:
		return c, fmt.Errorf("read the embedded server's credentials: %w", err)
	case !fi.Mode().IsRegular():
		return c, fmt.Errorf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return c, fmt.Errorf("%s has mode %v: the embedded server's credentials must be readable by their owner only (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := readSmall(path)
	if err != nil {
		return c, fmt.Errorf("read the embedded server's credentials: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil || c.User == "" || c.Password == "" {
		return c, fmt.Errorf("%s is not a credentials file of this engine (want {\"user\":…,\"password\":…}); remove it to have new ones generated", path)
	}
	return c, nil
}

func newCreds(path string) (localCreds, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return localCreds{}, err
	}
	c := localCreds{User: "noeta-local", Password: base64.RawURLEncoding.EncodeToString(raw[:])}
	b, _ := json.Marshal(c)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return c, fmt.Errorf("write the embedded server's credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return c, err
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return c, fmt.Errorf("write the embedded server's credentials: %w", err)
	}
	return c, nil
}

// attachment is a client's connection to the embedded server of the process
// that holds a data directory.
type attachment struct {
	dir    string
	holder Holder
	url    string
	creds  localCreds
}

// errHolderGone: the holder let go of the data directory while a client
// waited for it; the caller tries to take it itself.
var errHolderGone = errors.New("the holder of the data directory stopped")

// attachTo finds the server of busy's holder and the data directory's
// credentials. It waits a little for a holder that is still starting.
func attachTo(ctx context.Context, busy *BusyError) (*attachment, error) {
	deadline := time.Now().Add(holderWait)
	h, ok := busy.Holder, busy.Known
	for !ok || h.URL == "" {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%v, which has not said where its server listens after %v; try again, or stop it", busy, holderWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if !dataDirHeld(busy.Dir) {
			return nil, errHolderGone
		}
		h, ok = readHolder(busy.Dir)
	}
	if !loopbackURL(h.URL) {
		// The data directory's credentials go only to a server on this
		// host: a lock file that names another is not one an engine wrote.
		return nil, fmt.Errorf("%v says its server is at %q, which is not a loopback address; refusing to send it the data directory's credentials", busy, h.URL)
	}
	creds, err := loadCreds(busy.Dir, false)
	if err != nil {
		return nil, err
	}
	return &attachment{dir: busy.Dir, holder: h, url: h.URL, creds: creds}, nil
}

// loopbackURL reports whether u is a nats:// URL of a loopback address.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "nats" || p.User != nil {
		return false
	}
	ip := net.ParseIP(p.Hostname())
	return ip != nil && ip.IsLoopback()
}

// dataDirHeld reports whether some process holds dir's lock now.
func dataDirHeld(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f); err != nil {
		return errors.Is(err, errWouldBlock)
	}
	_ = funlock(f)
	return false
}

// claimOrAttach takes dir for a client host, or when another process holds
// it, attaches to that process's server.
func claimOrAttach(ctx context.Context, dir, verb string) (*dataLock, *attachment, error) {
	for {
		l, err := lockDataDir(dir, verb)
		if err == nil {
			return l, nil, nil
		}
		var busy *BusyError
		if !errors.As(err, &busy) {
			return nil, nil, err
		}
		a, err := attachTo(ctx, busy)
		if errors.Is(err, errHolderGone) {
			continue
		}
		return nil, a, err
	}
}

// DataDirHeld reports whether a process holds the data directory dir now:
// a host that runs tasks would be refused it, a client would attach.
func DataDirHeld(dir string) bool { return dataDirHeld(dir) }

// ReadHolder reads what the process holding dir says of itself; ok is false
// while nothing readable is there.
func ReadHolder(dir string) (Holder, bool) { return readHolder(dir) }

// Package jshost is the NATS half of running a host: it takes the data
// directory and starts the embedded nats-server (or attaches to the server
// of the process that holds it), connects to a remote server or cluster
// with retries, opens the event log, the dispatcher and the waiting index
// on JetStream (read-only where the deployment allows only reads), sends
// approval answers on the approvers' own subjects, and checks a store
// (Doctor). Its Backend is what package host runs over; it never imports
// host.
package jshost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/internal/backoff"
	"github.com/noeta-go/noeta/internal/natsconn"
)

// Connection are the settings of a connection to a NATS server or cluster:
// comma-separated URLs, a credentials file or a user and password, TLS.
type Connection = natsconn.Options

// Defaults of [Options].
const (
	DefaultDataDir = ".noeta"
	DefaultPrefix  = "noeta"
)

var (
	// ErrBadOptions marks options that cannot work; the message names the
	// option.
	ErrBadOptions = errors.New("jshost: bad options")
	// ErrBusy: another process holds the data directory (see [BusyError]).
	ErrBusy = errors.New("data directory in use")
	// ErrReadOnly: the backend was opened read-only and cannot write.
	ErrReadOnly = errors.New("jshost: opened read-only")
)

type optionError struct{ msg string }

func (e *optionError) Error() string        { return e.msg }
func (e *optionError) Is(target error) bool { return target == ErrBadOptions }

func badOption(format string, args ...any) error {
	return &optionError{fmt.Sprintf(format, args...)}
}

// Options say which deployment a backend opens and how.
type Options struct {
	// NATS is the NATS server or cluster. Without a URL the backend starts
	// an embedded nats-server with JetStream (sync always) on DataDir.
	NATS Connection
	// DataDir is the embedded server's data directory (DefaultDataDir,
	// made absolute). Only with no NATS URL.
	DataDir string
	// Prefix names the deployment's subjects, streams and buckets
	// (DefaultPrefix); Replicas their replicas (1; 3 on a cluster);
	// LeaseTTL the leases bucket's TTL (the dispatcher's default). Every
	// process of one prefix uses the same three.
	Prefix   string
	Replicas int
	LeaseTTL time.Duration
	// Batch is how the engine's batches of records are written
	// (jetstream.BatchAuto: one message per batch, ADR 0040;
	// BatchSequential keeps one record per message). Per process.
	Batch jetstream.BatchMode
	// Runs says the process runs tasks: on the embedded default it must
	// hold the data directory (a process that does not may attach to the
	// server of the one that does).
	Runs bool
	// ReadOnly opens only what a client that reads needs: on a remote NATS
	// it needs only read permissions (deploy/nats's operator role).
	ReadOnly bool
	// RetryStart retries a start on a remote NATS that fails for a reason
	// that may pass (servers restarting, electing leaders, unreachable)
	// with backoff until it succeeds or ctx ends.
	RetryStart bool
	// Name names the NATS connection and, its first word, the verb in the
	// data directory's lock ("host").
	Name string
	// Logger reports what the store cannot hold (discarded if nil).
	Logger *slog.Logger
}

// Embedded reports whether o runs on an embedded server.
func (o Options) Embedded() bool { return o.NATS.URL == "" }

// withDefaults checks o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Name == "" {
		o.Name = "host"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := o.NATS.Check(); err != nil {
		return o, badOption("%v", err)
	}
	if err := noeta.ValidateToken("prefix", o.Prefix, 32); err != nil {
		return o, badOption("%v", err)
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return o, badOption("replicas is %d, want 1 to 5 (1 on a single node, 3 on a cluster)", o.Replicas)
	}
	if o.LeaseTTL != 0 && (o.LeaseTTL < time.Second || o.LeaseTTL%time.Second != 0) {
		return o, badOption("lease TTL is %v, want whole seconds, at least 1s (it is the leases bucket's TTL)", o.LeaseTTL)
	}
	if o.ReadOnly && o.Runs {
		return o, badOption("a read-only host runs no workers")
	}
	if o.Embedded() {
		if o.Replicas > 1 {
			return o, badOption("replicas %d needs a cluster: the embedded server is a single node", o.Replicas)
		}
		if o.DataDir == "" {
			o.DataDir = DefaultDataDir
		}
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return o, badOption("data directory: %v", err)
		}
		o.DataDir = abs
	} else if o.DataDir != "" {
		return o, badOption("a data directory is for the embedded server; with a NATS URL there is none")
	}
	return o, nil
}

// Start-up retries: the pause between attempts grows from startRetryMin to
// startRetryMax, jittered so hosts restarted together do not retry
// together.
const (
	startRetryMin = 250 * time.Millisecond
	startRetryMax = 10 * time.Second
	// stopWait bounds the closing steps that wait on a remote NATS.
	stopWait = 10 * time.Second
)

// Backend is a deployment on JetStream, opened: the connection, the log,
// the dispatcher and the waiting index, and on the embedded default the
// server and the data directory's lock. It is a host.Backend with the
// capabilities a deployment shared by processes has (answers on approval
// subjects, health, the stream check, handoff recovery).
type Backend struct {
	opts Options

	srv    *embedded.Server // nil on a remote NATS or attached
	lock   *dataLock        // the data directory, held while srv runs
	attach *attachment      // set when a client uses another process's server
	nc     *nats.Conn

	log  *jetstream.Log
	disp *jetstream.Dispatcher
	// reader and rows serve a read-only backend on a remote NATS.
	reader *jetstream.Reader
	rows   *jetstream.RowReader

	waiting    *jetstream.WaitingIndex
	waitingErr error

	// awaiting is the handoff recovery the host registers after the
	// dispatcher, whose reconciler may already ask for it, opened.
	awaiting atomic.Pointer[func(ctx context.Context, parent string, subtasks []string)]

	closeOnce sync.Once
}

// Open connects and opens what opts ask for; on error everything started is
// shut down again. Errors of the options wrap [ErrBadOptions]; a data
// directory another process holds, for a process that runs tasks, is a
// [*BusyError].
func Open(ctx context.Context, opts Options) (*Backend, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	pause := backoff.New(startRetryMin, startRetryMax).Jittered()
	for attempt := 1; ; attempt++ {
		b, err := open(ctx, o)
		if err == nil {
			if attempt > 1 {
				o.Logger.Info("started after retries", "attempts", attempt)
			}
			return b, nil
		}
		if !o.RetryStart || ctx.Err() != nil || o.Embedded() || !startupTransient(err) {
			return nil, err
		}
		wait := pause.Take()
		o.Logger.Warn("start-up failed; retrying", "attempt", attempt, "in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last start-up error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func open(ctx context.Context, o Options) (_ *Backend, err error) {
	b := &Backend{opts: o}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	if o.ReadOnly && b.srv == nil && b.attach == nil {
		return b, b.openReadOnly(ctx)
	}
	dc := b.dispatcherConfig()
	dc.AwaitingSubtasks = b.recoverHandoffs
	if b.disp, err = jetstream.OpenDispatcher(ctx, b.nc, dc); err != nil {
		return nil, fmt.Errorf("open the dispatcher: %w", settingsHint(err))
	}
	lc := jetstream.Config{Prefix: o.Prefix, Replicas: o.Replicas, Registry: b.disp, Batch: o.Batch}
	if o.Embedded() && o.Replicas <= 1 {
		// The embedded server syncs every write (ADR 0107).
		lc.GroupCommit = jetstream.DefaultGroupCommit
	}
	b.log, err = jetstream.Open(ctx, b.nc, lc)
	if err != nil {
		return nil, fmt.Errorf("open the event log: %w", settingsHint(err))
	}
	if err := b.openWaiting(ctx, false); err != nil {
		return nil, err
	}
	if !o.Embedded() && !o.ReadOnly {
		// Observer workers write dead letters but may not create their
		// stream (deploy/nats): the engine does.
		if err := jetstream.EnsureDeadLetterStream(ctx, b.nc, o.Prefix, o.Replicas); err != nil {
			return nil, fmt.Errorf("create the dead-letter stream: %w", settingsHint(err))
		}
	}
	return b, nil
}

// connect connects — on the embedded default taking the data directory and
// starting its server first, or attaching to the server of the process that
// holds it (a process that runs no tasks only).
func (b *Backend) connect(ctx context.Context) error {
	o := b.opts
	name := "noeta-engine " + o.Name
	if !o.Embedded() {
		nc, err := o.NATS.Connect(name, o.Logger)
		if err != nil {
			return err
		}
		b.nc = nc
		return nil
	}
	var err error
	// The lock names the verb: the first word of the name.
	verb, _, _ := strings.Cut(o.Name, " ")
	if o.Runs {
		b.lock, err = lockDataDir(o.DataDir, verb)
	} else {
		b.lock, b.attach, err = claimOrAttach(ctx, o.DataDir, verb)
	}
	if err != nil {
		return err
	}
	if b.attach != nil {
		b.nc, err = nats.Connect(b.attach.url, nats.Name(name), nats.UserInfo(b.attach.creds.User, b.attach.creds.Password))
		if err != nil {
			return fmt.Errorf("connect to the server of %v: %w", b.attach.holder, err)
		}
		return nil
	}
	b.srv, err = embedded.Start(ctx, embedded.Config{
		Dir:  filepath.Join(o.DataDir, "nats"),
		User: b.lock.creds.User, Password: b.lock.creds.Password,
	})
	if err != nil {
		return fmt.Errorf("start the embedded NATS server in %s: %w", o.DataDir, err)
	}
	// This process's own connection goes through memory; the TCP listener
	// stays for the clients that attach, the nats CLI and observer-workers
	// (docs/adr/0037).
	if b.nc, err = b.srv.ConnectInProcess(nats.Name(name)); err != nil {
		return fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	return b.lock.serving(b.srv.ClientURL())
}

// openReadOnly opens what a read-only client on a remote NATS needs: the
// task stream and the dispatcher's rows, looked up, never created.
func (b *Backend) openReadOnly(ctx context.Context) error {
	var err error
	if b.reader, err = jetstream.OpenReader(ctx, b.nc, jetstream.Config{Prefix: b.opts.Prefix}); err != nil {
		return err
	}
	if b.rows, err = jetstream.OpenRowReader(ctx, b.nc, b.opts.Prefix); err != nil {
		return err
	}
	return b.openWaiting(ctx, true)
}

// openWaiting opens the fleet's waiting index: created if missing by a
// backend that may write (its engines write it), bound read-only otherwise.
// A read-only backend without the bucket opens anyway; its index then says
// why it has nothing.
func (b *Backend) openWaiting(ctx context.Context, readOnly bool) error {
	cfg := jetstream.WaitingConfig{Prefix: b.opts.Prefix, Replicas: b.opts.Replicas, Logger: b.opts.Logger}
	if !readOnly {
		x, err := jetstream.OpenWaitingIndex(ctx, b.nc, cfg)
		if err != nil {
			return fmt.Errorf("open the waiting index: %w", settingsHint(err))
		}
		b.waiting = x
		return nil
	}
	x, err := jetstream.BindWaitingIndex(ctx, b.nc, cfg)
	switch {
	case errors.Is(err, jetstream.ErrStreamMissing):
		b.waitingErr = fmt.Errorf("%w: %w", eventlog.ErrNoWaitingIndex, err)
		return nil
	case err != nil:
		return fmt.Errorf("open the waiting index: %w", err)
	}
	b.waiting = x
	return nil
}

// dispatcherConfig is the dispatcher of the backend's prefix: every process
// of one prefix uses the same prefix, replicas and lease TTL.
//
// An answer on an approval subject is vouched for by the broker (auth
// nats) only on a remote NATS, where deploy/nats lets each approver's user
// publish under its own name alone. The embedded server has one user, the
// data directory's, who may publish on every approver's subject: there
// such an answer proves only that its sender holds the data directory
// (auth local), as an answer handed over in process does (docs/adr/0048).
//
// The embedded server syncs every write; there the lease keys and the
// ready signals, which the rows and the logs can always rebuild, are
// persisted asynchronously (ADR 0109).
func (b *Backend) dispatcherConfig() jetstream.DispatcherConfig {
	auth := noeta.AuthNATS
	if b.opts.Embedded() {
		auth = noeta.AuthLocal
	}
	return jetstream.DispatcherConfig{Prefix: b.opts.Prefix, Replicas: b.opts.Replicas, LeaseTTL: b.opts.LeaseTTL, Logger: b.opts.Logger,
		ApproveSubjectAuth: auth, AsyncLiveness: b.opts.Embedded() && b.opts.Replicas <= 1}
}

// recoverHandoffs is the dispatcher's AwaitingSubtasks: the host's handoff
// recovery once it registered one.
func (b *Backend) recoverHandoffs(ctx context.Context, parent string, subtasks []string) {
	if fn := b.awaiting.Load(); fn != nil {
		(*fn)(ctx, parent, subtasks)
	}
}

// RecoverAwaiting registers fn as the redo of the subtask handoffs of a
// parent that has waited on them for a reconcile pass, and asks the next
// pass to redo those of every parent waiting on ended subtasks: their
// handoffs may have died with another process.
func (b *Backend) RecoverAwaiting(fn func(ctx context.Context, parent string, subtasks []string)) {
	if b.disp == nil {
		return
	}
	b.awaiting.Store(&fn)
	b.disp.RecoverAwaiting()
}

// Log is the event log: on a backend opened read-only on a remote NATS, a
// reader whose writes fail with ErrReadOnly.
func (b *Backend) Log() eventlog.EventLog {
	if b.log != nil {
		return b.log
	}
	return readOnlyLog{b.reader}
}

// Dispatcher is the dispatcher: read-only on a remote NATS, its rows,
// whose writes fail with ErrReadOnly.
func (b *Backend) Dispatcher() eventlog.Dispatcher {
	if b.disp != nil {
		return b.disp
	}
	return readOnlyRows{b.rows}
}

// Content is the content store (read-only on a remote NATS: Put fails).
func (b *Backend) Content() eventlog.ContentStore {
	if b.log != nil {
		return b.log
	}
	return readOnlyLog{b.reader}
}

// Waiting is the fleet's waiting index; on a read-only backend that found
// none, one whose every call says so (eventlog.ErrNoWaitingIndex).
func (b *Backend) Waiting() eventlog.WaitingIndex {
	if b.waiting == nil {
		return missingWaiting{b.waitingErr}
	}
	return b.waiting
}

// ReadOnly reports whether the backend only reads.
func (b *Backend) ReadOnly() bool { return b.log == nil }

// JetStreamLog is the JetStream event log, for tools that append under
// leases of their own (engine bench); nil on a read-only backend.
func (b *Backend) JetStreamLog() *jetstream.Log { return b.log }

// JetStreamDispatcher is the JetStream dispatcher (nil read-only).
func (b *Backend) JetStreamDispatcher() *jetstream.Dispatcher { return b.disp }

// WaitingIndex is the JetStream waiting index (nil when a read-only
// backend found none).
func (b *Backend) WaitingIndex() *jetstream.WaitingIndex { return b.waiting }

// Conn is the NATS connection.
func (b *Backend) Conn() *nats.Conn { return b.nc }

// Prefix is the deployment's prefix.
func (b *Backend) Prefix() string { return b.opts.Prefix }

// Replicas is the replicas of the deployment's streams and buckets.
func (b *Backend) Replicas() int { return b.opts.Replicas }

// Rates opens the deployment's rate limit counts (jetstream.OpenRates),
// creating their bucket if it is missing.
func (b *Backend) Rates(ctx context.Context) (*jetstream.Rates, error) {
	r, err := jetstream.OpenRates(ctx, b.nc, b.opts.Prefix, b.opts.Replicas)
	if err != nil {
		return nil, fmt.Errorf("open the rate limits' bucket: %w", settingsHint(err))
	}
	return r, nil
}

// Embedded reports whether the backend runs on an embedded server (its
// own or, attached, another process's).
func (b *Backend) Embedded() bool { return b.opts.Embedded() }

// Attached returns the holder whose server a client uses, and whether it
// uses one.
func (b *Backend) Attached() (Holder, bool) {
	if b.attach == nil {
		return Holder{}, false
	}
	return b.attach.holder, true
}

// DataDir is the embedded server's data directory ("" on a remote NATS).
func (b *Backend) DataDir() string { return b.opts.DataDir }

// Healthy reports why the backend cannot do its work, or nil: it is
// connected.
func (b *Backend) Healthy() error {
	if s := b.nc.Status(); s != nats.CONNECTED {
		return errors.New("nats: " + s.String())
	}
	return nil
}

// CheckStream reports a task stream the store has lost records of.
func (b *Backend) CheckStream(ctx context.Context) error {
	if b.log != nil {
		return b.log.CheckStream(ctx)
	}
	return b.reader.CheckStream(ctx)
}

// Close closes the dispatcher, the log, the connection and the embedded
// server, which flushes and closes its store, then lets the data directory
// go. On a remote NATS that cannot be reached, the steps that would wait
// on it are given up after a bound. It is safe to call more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(b.close)
	return nil
}

func (b *Backend) close() {
	var steps []func()
	if b.disp != nil {
		d := b.disp
		steps = append(steps, func() { _ = d.Close() })
	}
	if b.log != nil {
		l := b.log
		steps = append(steps, func() { _ = l.Close() })
	}
	if b.reader != nil {
		r := b.reader
		steps = append(steps, func() { _ = r.Close() })
	}
	if b.nc != nil {
		steps = append(steps, b.nc.Close)
	}
	if b.srv != nil {
		// The embedded server is local: no bound, it must flush.
		for _, s := range steps {
			s()
		}
		b.srv.Shutdown()
	} else {
		runWithin(steps, stopWait, b.opts.Logger)
	}
	// Only once the server has flushed and closed its store may another
	// process start one on the directory.
	b.lock.release()
}

// runWithin runs steps in order, giving up after within: with NATS
// unreachable, closing a dispatcher waits for requests that time out, and
// there is nothing left to flush.
func runWithin(steps []func(), within time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, s := range steps {
			s()
		}
	}()
	select {
	case <-done:
	case <-time.After(within):
		logger.Warn("closing the NATS connection did not finish in time (is NATS reachable?); exiting anyway", "waited", within)
	}
}

// settingsHint adds a hint to the error of a dispatcher or log that found
// its buckets made with another TTL or replica count.
func settingsHint(err error) error {
	if errors.Is(err, jetstream.ErrConfigMismatch) {
		return fmt.Errorf("%w\n(every process of one prefix must use the same --lease-ttl and --replicas)", err)
	}
	return err
}

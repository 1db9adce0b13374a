package memlog

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// taskLog is one task's log and inbox. Its mutex is the task's writer lock:
// every append to the task happens under it, nothing else does, and it is
// never held while a subscriber runs.
type taskLog struct {
	mu sync.Mutex

	records chunks // the log; record Seq n is records.at(n)
	inbox   []eventlog.Envelope
	keys    map[string]int // inbox key -> index in inbox

	// idem maps (lease id, key) to the records it wrote. Entries are never
	// removed: an idempotent retry must find its records however late it comes.
	idem map[idemKey]idemHit

	// The log's fence: the lease whose LeaseGranted is the newest in the log.
	fenceGen   uint64
	fenceLease string

	lastBaseline uint64 // Seq of the newest baseline record, 0 if none
}

type idemKey struct{ lease, key string }

// idemHit is what a key wrote: n records from Seq seq.
type idemHit struct {
	seq uint64
	n   int
}

func (tl *taskLog) lastSeq() uint64 { return tl.records.n }

func (tl *taskLog) append(env eventlog.Envelope) eventlog.Envelope {
	env.Seq = tl.lastSeq() + 1
	tl.records.push(env)
	if noeta.IsBaselineType(env.Type) {
		tl.lastBaseline = env.Seq
	}
	return env
}

// chunks stores a log in fixed-size blocks, so an append never copies the
// records before it (a single growing slice would, and the GC would scan the
// abandoned copies).
type chunks struct {
	blocks [][]eventlog.Envelope
	n      uint64
}

// A log's first blocks are small and double up to chunkLen: most tasks'
// logs are short, and a block of 512 envelopes (over 100 KiB) for a task of
// 90 records was a quarter of what running a short task in memory
// allocated. Blocks hold 32, 64, 128, 256, then 512 records each: a
// 20-call task's 86 records take the first two.
const (
	firstChunkLen = 32
	chunkLen      = 512
	// smallChunks is the number of records in the blocks before the first
	// of chunkLen: 32 + 64 + 128 + 256, in smallBlocks blocks.
	smallChunks = chunkLen - firstChunkLen
	smallBlocks = 4
)

// blockOf returns the block and the offset in it of the record at index i
// (0-based), and the block's capacity.
func blockOf(i uint64) (block int, off, size uint64) {
	if i >= smallChunks {
		i -= smallChunks
		return smallBlocks + int(i/chunkLen), i % chunkLen, chunkLen
	}
	size = firstChunkLen
	for i >= size {
		i -= size
		size *= 2
		block++
	}
	return block, i, size
}

func (c *chunks) push(env eventlog.Envelope) {
	if _, off, size := blockOf(c.n); off == 0 {
		c.blocks = append(c.blocks, make([]eventlog.Envelope, 0, size))
	}
	b := &c.blocks[len(c.blocks)-1]
	*b = append(*b, env)
	c.n++
}

// views returns the stored records with Seq > after, as the blocks hold
// them (no copy), for a caller under the log's lock. A stored record is
// never written again, so the views may be read after the lock is
// released: later appends write only past them.
func (c *chunks) views(after uint64) [][]eventlog.Envelope {
	var out [][]eventlog.Envelope
	for i := after; i < c.n; {
		blk, off, _ := blockOf(i)
		b := c.blocks[blk][off:]
		out = append(out, b)
		i += uint64(len(b))
	}
	return out
}

// at returns the record with Seq seq (1-based).
func (c *chunks) at(seq uint64) eventlog.Envelope {
	i := seq - 1
	b, off, _ := blockOf(i)
	return c.blocks[b][off]
}

// from returns the records with Seq > after.
func (c *chunks) from(after uint64) []eventlog.Envelope {
	if after >= c.n {
		return []eventlog.Envelope{}
	}
	out := make([]eventlog.Envelope, 0, c.n-after)
	size := 0
	for i := after; i < c.n; {
		blk, off, _ := blockOf(i)
		b := c.blocks[blk][off:]
		for _, env := range b {
			size += len(env.Payload)
		}
		out = append(out, b...)
		i += uint64(len(b))
	}
	// One allocation for every payload copy, not one per record.
	buf := make([]byte, 0, size)
	for i := range out {
		start := len(buf)
		buf = append(buf, out[i].Payload...)
		out[i].Payload = buf[start:len(buf):len(buf)]
	}
	return out
}

func (s *Store) lookup(task string) *taskLog {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tasks[task]
}

func (s *Store) mustLookup(task string) (*taskLog, error) {
	if err := noeta.ValidateTaskID(task); err != nil {
		return nil, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	tl := s.lookup(task)
	if tl == nil {
		return nil, fmt.Errorf("%w: task %s", eventlog.ErrNotFound, task)
	}
	return tl, nil
}

// Create implements eventlog.Writer.
func (s *Store) Create(ctx context.Context, env eventlog.Envelope) (eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	env, err := eventlog.PrepareRecord(env.Task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if env.Type != noeta.TypeTaskCreated {
		return eventlog.Envelope{}, fmt.Errorf("%w: genesis type is %q, want %s", eventlog.ErrInvalidArgument, env.Type, noeta.TypeTaskCreated)
	}
	var tc noeta.TaskCreated
	if err := json.Unmarshal(env.Payload, &tc); err != nil {
		return eventlog.Envelope{}, fmt.Errorf("%w: TaskCreated payload: %v", eventlog.ErrInvalidArgument, err)
	}
	if tc.TaskID != "" && tc.TaskID != env.Task {
		return eventlog.Envelope{}, fmt.Errorf("%w: TaskCreated.task_id %q differs from the envelope's task %q", eventlog.ErrInvalidArgument, tc.TaskID, env.Task)
	}
	if err := eventlog.CheckCap(env); err != nil {
		return eventlog.Envelope{}, err
	}
	env.ID = noeta.NewID()
	env.LeaseGen = 0
	env.Key = ""

	s.mu.Lock()
	if _, ok := s.tasks[env.Task]; ok {
		s.mu.Unlock()
		return eventlog.Envelope{}, fmt.Errorf("%w: task %s", eventlog.ErrTaskExists, env.Task)
	}
	tl := &taskLog{keys: map[string]int{}, idem: map[idemKey]idemHit{}}
	env.Time = s.clock.Now()
	stored := tl.append(env.Clone())
	s.tasks[env.Task] = tl
	s.mu.Unlock()

	s.subs.Notify(ctx, stored)
	env.Seq = stored.Seq
	return env, nil
}

// Emit implements eventlog.Writer: the fenced business write.
func (s *Store) Emit(ctx context.Context, lease eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	task := lease.Task
	if task == "" {
		task = env.Task
	}
	env, err := eventlog.PrepareRecord(task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return eventlog.Envelope{}, err
	}

	tl.mu.Lock()
	if opts.IdempotencyKey != "" && lease.ID != "" {
		if hit, ok := tl.idem[idemKey{lease.ID, opts.IdempotencyKey}]; ok {
			orig := tl.records.at(hit.seq).Clone()
			tl.mu.Unlock()
			return orig, nil
		}
	}
	if err := eventlog.CheckCap(env); err != nil {
		tl.mu.Unlock()
		return eventlog.Envelope{}, err
	}
	if opts.ExpectLastSeq != 0 && opts.ExpectLastSeq != tl.lastSeq() {
		last := tl.lastSeq()
		tl.mu.Unlock()
		return eventlog.Envelope{}, fmt.Errorf("%w: task_id=%s, expected last seq %d, actual %d", eventlog.ErrStaleSequence, task, opts.ExpectLastSeq, last)
	}
	now := s.clock.Now()
	if err := s.checkFence(tl, lease, now); err != nil {
		tl.mu.Unlock()
		return eventlog.Envelope{}, err
	}

	var out [2]eventlog.Envelope
	n := 0
	if tl.fenceLease != lease.ID {
		lg, err := leaseGranted(lease, env.CorrelationID)
		if err != nil {
			tl.mu.Unlock()
			return eventlog.Envelope{}, err
		}
		lg.ID = noeta.NewIDAt(now)
		lg.Time = now
		out[n] = tl.append(lg)
		n++
		tl.fenceGen, tl.fenceLease = lease.Generation, lease.ID
	}
	env.ID = noeta.NewIDAt(now)
	env.Time = now
	env.LeaseGen = lease.Generation
	env.Key = ""
	// The stored record gets its own copy of the payload; the caller gets back
	// the prepared bytes, which are either its own or fresh.
	out[n] = tl.append(env.Clone())
	env.Seq = out[n].Seq
	n++
	if opts.IdempotencyKey != "" {
		tl.idem[idemKey{lease.ID, opts.IdempotencyKey}] = idemHit{env.Seq, 1}
	}
	tl.mu.Unlock()

	s.subs.Notify(ctx, out[:n]...)
	return env, nil
}

// EmitBatch implements eventlog.BatchWriter: all or nothing, under the
// task's writer lock, so no other record lands between the batch's records.
func (s *Store) EmitBatch(ctx context.Context, lease eventlog.Lease, envs []eventlog.Envelope, opts eventlog.EmitOptions) ([]eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	task := lease.Task
	if task == "" && len(envs) > 0 {
		task = envs[0].Task
	}
	if err := eventlog.CheckBatch(task, envs); err != nil {
		return nil, err
	}
	prepared := make([]eventlog.Envelope, len(envs))
	for i, env := range envs {
		p, err := eventlog.PrepareRecord(task, env)
		if err != nil {
			return nil, fmt.Errorf("batch record %d: %w", i, err)
		}
		prepared[i] = p
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return nil, err
	}

	tl.mu.Lock()
	if opts.IdempotencyKey != "" && lease.ID != "" {
		if hit, ok := tl.idem[idemKey{lease.ID, opts.IdempotencyKey}]; ok {
			orig := make([]eventlog.Envelope, hit.n)
			for i := range orig {
				orig[i] = tl.records.at(hit.seq + uint64(i)).Clone()
			}
			tl.mu.Unlock()
			return orig, nil
		}
	}
	for i, env := range prepared {
		if err := eventlog.CheckCap(env); err != nil {
			tl.mu.Unlock()
			return nil, fmt.Errorf("batch record %d: %w", i, err)
		}
	}
	if opts.ExpectLastSeq != 0 && opts.ExpectLastSeq != tl.lastSeq() {
		last := tl.lastSeq()
		tl.mu.Unlock()
		return nil, fmt.Errorf("%w: task_id=%s, expected last seq %d, actual %d", eventlog.ErrStaleSequence, task, opts.ExpectLastSeq, last)
	}
	now := s.clock.Now()
	if err := s.checkFence(tl, lease, now); err != nil {
		tl.mu.Unlock()
		return nil, err
	}
	// Subscribers are handed the stored records themselves (Notify gives
	// each delivery its own copy), read from the blocks after the lock.
	first := tl.lastSeq()
	if tl.fenceLease != lease.ID {
		lg, err := leaseGranted(lease, prepared[0].CorrelationID)
		if err != nil {
			tl.mu.Unlock()
			return nil, err
		}
		lg.ID = noeta.NewIDAt(now)
		lg.Time = now
		tl.append(lg)
		tl.fenceGen, tl.fenceLease = lease.Generation, lease.ID
	}
	// The records the caller gets back are the prepared ones, completed in
	// place: prepared is this call's own.
	out := prepared
	// The log's copies of the payloads share one allocation, as a read's
	// do: they are stored and dropped together.
	size := 0
	for _, env := range prepared {
		size += len(env.Payload)
	}
	buf := make([]byte, 0, size)
	for i, env := range prepared {
		env.ID = noeta.NewIDAt(now)
		env.Time = now
		env.LeaseGen = lease.Generation
		env.Key = ""
		own := env
		start := len(buf)
		buf = append(buf, env.Payload...)
		own.Payload = buf[start:len(buf):len(buf)]
		stored := tl.append(own)
		env.Seq = stored.Seq
		out[i] = env
	}
	if opts.IdempotencyKey != "" {
		tl.idem[idemKey{lease.ID, opts.IdempotencyKey}] = idemHit{out[0].Seq, len(out)}
	}
	notify := tl.records.views(first)
	tl.mu.Unlock()

	for _, v := range notify {
		s.subs.Notify(ctx, v...)
	}
	return out, nil
}

// BatchAtomic implements eventlog.BatchWriter: a batch lands whole or not at
// all.
func (s *Store) BatchAtomic() bool { return true }

// checkFence runs under tl.mu. The log's own fence is checked first: once a
// newer generation's LeaseGranted is in the log, the older holder is out
// whatever the registry says. Then the registry: the lease must be live now.
// Because the registry is asked under the writer lock, a takeover's first
// append (which needs the same lock) orders after every append that passed.
func (s *Store) checkFence(tl *taskLog, lease eventlog.Lease, now time.Time) error {
	if lease.ID == "" || lease.Generation == 0 {
		return fmt.Errorf("%w: no lease (id %q, generation %d) given for task %s", eventlog.ErrInvalidLease, lease.ID, lease.Generation, lease.Task)
	}
	if tl.fenceGen > lease.Generation || tl.fenceGen == lease.Generation && tl.fenceLease != lease.ID {
		return fmt.Errorf("%w: task_id=%s, lease_id=%s generation %d, log fenced by lease %s generation %d",
			eventlog.ErrLeaseLost, lease.Task, lease.ID, lease.Generation, tl.fenceLease, tl.fenceGen)
	}
	return s.leaseLive(lease, now)
}

// leaseGranted is the fence record an Emit writes before env; it belongs to
// the same task tree as env, so it carries env's correlation id.
func leaseGranted(lease eventlog.Lease, correlationID string) (eventlog.Envelope, error) {
	env, err := eventlog.NewEnvelope(lease.Task, eventlog.OriginEngine, lease.Worker,
		noeta.LeaseGranted{LeaseID: lease.ID, Generation: lease.Generation, Worker: lease.Worker})
	if err != nil {
		return env, err
	}
	if env.Actor == "" {
		env.Actor = "dispatcher"
	}
	env.ID = noeta.NewID()
	env.CorrelationID = correlationID
	env.LeaseGen = lease.Generation
	return env, nil
}

// SystemEmit implements eventlog.Writer: the lease-free inbox write.
func (s *Store) SystemEmit(ctx context.Context, task, key string, env eventlog.Envelope) (eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	env, err := eventlog.PrepareRecord(task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if err := noeta.ValidateToken("inbox key", key, eventlog.MaxInboxKeyLen); err != nil {
		return eventlog.Envelope{}, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return eventlog.Envelope{}, err
	}

	tl.mu.Lock()
	if i, ok := tl.keys[key]; ok {
		orig := tl.inbox[i].Clone()
		tl.mu.Unlock()
		return orig, fmt.Errorf("%w: inbox key %s of task %s", eventlog.ErrAlreadyExists, key, task)
	}
	if err := eventlog.CheckCap(env); err != nil {
		tl.mu.Unlock()
		return eventlog.Envelope{}, err
	}
	env.ID = noeta.NewID()
	env.Time = s.clock.Now()
	env.Seq = 0
	env.Key = key
	env.LeaseGen = 0
	tl.keys[key] = len(tl.inbox)
	stored := env.Clone()
	tl.inbox = append(tl.inbox, stored)
	tl.mu.Unlock()

	s.subs.Notify(ctx, stored)
	return env, nil
}

// Read implements eventlog.Reader.
func (s *Store) Read(ctx context.Context, task string, afterSeq uint64) ([]eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return nil, err
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.records.from(afterSeq), nil
}

// Inbox implements eventlog.Reader.
func (s *Store) Inbox(ctx context.Context, task string) ([]eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return nil, err
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]eventlog.Envelope, len(tl.inbox))
	for i := range tl.inbox {
		out[i] = tl.inbox[i].Clone()
	}
	return out, nil
}

// LatestSnapshot implements eventlog.Reader in constant time.
func (s *Store) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	tl, err := s.mustLookup(task)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.lastBaseline == 0 {
		return eventlog.Envelope{}, fmt.Errorf("%w: no snapshot of task %s", eventlog.ErrNotFound, task)
	}
	return tl.records.at(tl.lastBaseline).Clone(), nil
}

// Subscribe implements eventlog.Subscriber.
func (s *Store) Subscribe(h eventlog.Handler) *eventlog.Subscription { return s.subs.Subscribe(h) }

// Tasks implements eventlog.TaskIndex.
func (s *Store) Tasks(ctx context.Context) ([]eventlog.TaskSummary, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	logs := make(map[string]*taskLog, len(s.tasks))
	for id, tl := range s.tasks {
		logs[id] = tl
	}
	s.mu.RUnlock()
	out := make([]eventlog.TaskSummary, 0, len(logs))
	for id, tl := range logs {
		tl.mu.Lock()
		var last time.Time
		if n := tl.lastSeq(); n > 0 {
			last = tl.records.at(n).Time
		}
		out = append(out, eventlog.TaskSummary{Task: id, LastSeq: tl.lastSeq(), LastTime: last})
		tl.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b eventlog.TaskSummary) int {
		if c := b.LastTime.Compare(a.LastTime); c != 0 {
			return c
		}
		return cmp.Compare(a.Task, b.Task)
	})
	return out, nil
}

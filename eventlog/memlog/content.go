package memlog

import (
	"context"
	"fmt"
	"sync"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

type contentStore struct {
	mu     sync.RWMutex
	bodies map[string][]byte // sha256 hex -> body
}

func (c *contentStore) init() { c.bodies = map[string][]byte{} }

// Put implements eventlog.ContentStore.
func (s *Store) Put(ctx context.Context, body []byte, mediaType string) (noeta.ContentRef, error) {
	if err := s.check(ctx); err != nil {
		return noeta.ContentRef{}, err
	}
	ref := noeta.RefFor(body, mediaType)
	s.content.mu.Lock()
	if _, ok := s.content.bodies[ref.Hash]; !ok {
		s.content.bodies[ref.Hash] = append([]byte(nil), body...)
	}
	s.content.mu.Unlock()
	return ref, nil
}

// Get implements eventlog.ContentStore.
func (s *Store) Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.content.mu.RLock()
	b, ok := s.content.bodies[ref.Hash]
	s.content.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: content %s", eventlog.ErrNotFound, ref.Hash)
	}
	return append([]byte(nil), b...), nil
}

// GetMany implements eventlog.ContentStore.
func (s *Store) GetMany(ctx context.Context, refs []noeta.ContentRef) (map[string][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	s.content.mu.RLock()
	defer s.content.mu.RUnlock()
	for _, r := range refs {
		if b, ok := s.content.bodies[r.Hash]; ok {
			out[r.Hash] = append([]byte(nil), b...)
		}
	}
	return out, nil
}

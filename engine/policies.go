package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/noeta-go/noeta"
)

// contentFetcher fetches a script body.
type contentFetcher interface {
	Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error)
}

// maxCachedScripts bounds the parsed scripts a resolver keeps.
const maxCachedScripts = 1024

// ScriptedPolicies resolves a task's policy from its script_ref: the script
// body from the content store, made a Policy by parse (policy.ParseScripted,
// in a binary's wiring). Parsed scripts are cached by
// hash, since the children of one fan-out usually share one. A task without a
// script has no policy here: the error names its agent.
func ScriptedPolicies[P Policy](cs contentFetcher, parse func(script []byte) (P, error)) PolicyResolver {
	var mu sync.Mutex
	cache := map[string]Policy{}
	return func(ctx context.Context, st *State) (Policy, error) {
		if st.ScriptRef == nil {
			return nil, fmt.Errorf("task %s has no script and agent %q has no other policy configured", st.Task, st.Agent)
		}
		h := st.ScriptRef.Hash
		mu.Lock()
		p, ok := cache[h]
		mu.Unlock()
		if ok {
			return p, nil
		}
		body, err := cs.Get(ctx, *st.ScriptRef)
		if err != nil {
			return nil, fmt.Errorf("script %s: %w", h, err)
		}
		parsed, err := parse(body)
		if err != nil {
			return nil, fmt.Errorf("script %s: %w", h, err)
		}
		p = parsed
		mu.Lock()
		if len(cache) >= maxCachedScripts {
			clear(cache)
		}
		cache[h] = p
		mu.Unlock()
		return p, nil
	}
}

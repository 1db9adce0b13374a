package eventlog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/noeta-go/noeta"
)

// MediaTypeJSON is the media type of spilled JSON bodies.
const MediaTypeJSON = "application/json"

// Spill keeps a JSON body inline when its canonical form fits in limit bytes,
// and otherwise puts it in cs and returns a ref in its place. Exactly one of the
// results is set. Payload fields such as goal|goal_ref and output|output_ref are
// filled from it, so a record never goes over the cap because of one big body.
func Spill(ctx context.Context, cs ContentStore, body json.RawMessage, limit int) (json.RawMessage, *noeta.ContentRef, error) {
	canon, err := noeta.CanonicalizeJSON(body)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: spilled body: %v", ErrInvalidArgument, err)
	}
	if len(canon) <= limit {
		return canon, nil, nil
	}
	ref, err := cs.Put(ctx, canon, MediaTypeJSON)
	if err != nil {
		return nil, nil, err
	}
	return nil, &ref, nil
}

// SpillString is Spill for a text field (a goal): the text stays inline if its
// JSON string encoding fits in limit, else the content store gets the JSON
// string and "" stays inline.
func SpillString(ctx context.Context, cs ContentStore, s string, limit int) (string, *noeta.ContentRef, error) {
	b, err := noeta.Canonical(s)
	if err != nil {
		return "", nil, fmt.Errorf("%w: spilled text: %v", ErrInvalidArgument, err)
	}
	if len(b) <= limit {
		return s, nil, nil
	}
	ref, err := cs.Put(ctx, b, MediaTypeJSON)
	if err != nil {
		return "", nil, err
	}
	return "", &ref, nil
}

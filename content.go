package noeta

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ContentRef points at a body in the content store. Hash is the lowercase hex
// sha256 of the body and the only lookup key; Size and MediaType describe it.
// A payload carries a ref in place of a body over the inline limit.
type ContentRef struct {
	Hash      string `json:"hash"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type"`
}

// RefFor returns the ref of body.
func RefFor(body []byte, mediaType string) ContentRef {
	sum := sha256.Sum256(body)
	return ContentRef{Hash: hex.EncodeToString(sum[:]), Size: int64(len(body)), MediaType: mediaType}
}

// Validate reports a ref whose hash is not 64 lowercase hex digits or whose size
// is negative.
func (r ContentRef) Validate() error {
	if len(r.Hash) != 64 {
		return fmt.Errorf("noeta: content ref hash %q is not 64 hex digits", r.Hash)
	}
	for i := 0; i < len(r.Hash); i++ {
		c := r.Hash[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("noeta: content ref hash %q is not lowercase hex", r.Hash)
		}
	}
	if r.Size < 0 {
		return fmt.Errorf("noeta: content ref size %d is negative", r.Size)
	}
	return nil
}

package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// errNoMessage: the leader has no message matching the request.
var errNoMessage = errors.New("jetstream: no message")

type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

type storedMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs,omitempty"`
	Data     []byte    `json:"data,omitempty"`
	Time     time.Time `json:"time"`
}

type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     uint16 `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Message *storedMsg `json:"message,omitempty"`
}

// leaderGet asks the stream leader (not a direct-get responder, which may be a
// stale replica) for one message. Decisions about writes are made on what it
// returns: a stale read there could only cost a retry, but a leader read costs
// none.
func (l *Log) leaderGet(ctx context.Context, req msgGetRequest) (*storedMsg, nats.Header, error) {
	body, _ := json.Marshal(req)
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	resp, err := l.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+l.streamName, body)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: leader get on %s: %w", l.streamName, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, nil, fmt.Errorf("jetstream: leader get on %s: bad response: %w", l.streamName, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == 10037 { // no message; 10059 (no stream) is also a 404 but is an error
			return nil, nil, errNoMessage
		}
		return nil, nil, fmt.Errorf("jetstream: leader get on %s: %s (code %d)", l.streamName, r.Error.Description, r.Error.ErrCode)
	}
	if r.Message == nil {
		return nil, nil, errNoMessage
	}
	var hdr nats.Header
	if len(r.Message.Header) > 0 {
		hdr, err = nats.DecodeHeadersMsg(r.Message.Header)
		if err != nil {
			return nil, nil, &CorruptRecordError{Subject: r.Message.Subject, StreamSeq: r.Message.Sequence, Err: fmt.Errorf("headers: %v", err)}
		}
	}
	return r.Message, hdr, nil
}

func (l *Log) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, l.cfg.RequestTimeout)
}

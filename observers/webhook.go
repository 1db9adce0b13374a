package observers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/redact"
)

const (
	// webhookBackoffMax caps the wait between two attempts, and a
	// Retry-After a server asks for.
	webhookBackoffMax = 30 * time.Second
	// agentCacheMax bounds the agents remembered by task.
	agentCacheMax = 4096
)

// webhookClient follows no redirect (a 3xx is the answer, and a failure):
// a redirect would carry the headers' credentials to wherever it points.
// Each attempt's deadline is its request's context.
func webhookClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// deliverWebhook sends a notification to its webhook: attempts of at most the hook's
// timeout each, tried again with backoff after a connection error, a
// timeout, a 408, a 429 or a 5xx, up to the hook's retries. Any other answer
// ends it: 2xx delivered; a 3xx or another 4xx failed, and not retried (the
// request, not the moment, is wrong). Close ends the waits.
func (h *Hooks) deliverWebhook(r hookRun) {
	start := time.Now()
	wh := r.webhook
	// A webhook's path or query is often its credential (Slack's, Discord's):
	// the log names only its scheme and host (redact.URL), and an error
	// that quotes the URL is redacted the same way.
	log := h.log.With("hook", r.label, "url", redact.URL(wh.URL), "task", r.env.Task, "seq", r.env.Seq, "type", r.env.Type)
	n := *r.notice
	if n.Agent == "" {
		n.Agent = h.agentOf(r.env.Task)
	}
	body, err := json.Marshal(n)
	if err != nil {
		h.failed.Add(1)
		log.Warn("hooks: the notification cannot be encoded", "err", err)
		return
	}
	var (
		last     error
		timedOut bool
		wait     time.Duration
	)
	for attempt := 0; attempt <= wh.Retries; attempt++ {
		if attempt > 0 {
			h.retried.Add(1)
			t := time.NewTimer(wait)
			select {
			case <-h.runCtx.Done():
				t.Stop()
				h.failed.Add(1)
				log.Warn("hooks: the webhook was cancelled by Close between attempts", "attempts", attempt, "err", last)
				return
			case <-t.C:
			}
		}
		status, retryAfter, respText, err := h.attempt(r, body)
		if err == nil && status/100 == 2 {
			h.ran.Add(1)
			log.Debug("hooks: the webhook was delivered", "status", status, "attempts", attempt+1, "duration", time.Since(start).Round(time.Millisecond))
			return
		}
		retry := false
		switch {
		case err != nil:
			last, retry = redact.Error(err, wh.URL), true
			timedOut = errors.Is(err, context.DeadlineExceeded)
		case status/100 == 3:
			last = fmt.Errorf("answered %d: redirects are not followed; give the hook the final URL", status)
		case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status/100 == 5:
			last, retry, timedOut = fmt.Errorf("answered %d: %s", status, respText), true, false
		default:
			last = fmt.Errorf("answered %d: %s", status, respText)
		}
		if !retry || h.runCtx.Err() != nil {
			timedOut = false
			break
		}
		wait = backoff(h.cfg.WebhookBackoff, attempt)
		if retryAfter > wait {
			wait = min(retryAfter, webhookBackoffMax)
		}
	}
	attrs := []any{"err", last, "duration", time.Since(start).Round(time.Millisecond)}
	if timedOut {
		h.timedOut.Add(1)
		log.Warn("hooks: the webhook timed out on its last attempt; the notification is lost", append(attrs, "timeout", wh.Timeout)...)
		return
	}
	h.failed.Add(1)
	log.Warn("hooks: the webhook failed; the notification is lost", attrs...)
}

// attempt makes one POST. It returns the status, a Retry-After in seconds
// if the server sent one, and the start of the response body for the log.
func (h *Hooks) attempt(r hookRun, body []byte) (int, time.Duration, string, error) {
	wh := r.webhook
	ctx, cancel := context.WithTimeout(h.runCtx, wh.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, "", err
	}
	for k, v := range wh.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "noeta-hooks")
	// The same on every delivery of the record: a receiver de-duplicates by
	// it (hooks are at least once).
	req.Header.Set("Noeta-Event-Id", r.env.ID)
	req.Header.Set("Noeta-Notification", r.event)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	out := &hookOutput{max: 512}
	_, rerr := io.Copy(out, io.LimitReader(resp.Body, WebhookResponseMax))
	var after time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		after = time.Duration(s) * time.Second
	}
	if rerr != nil && resp.StatusCode/100 == 2 {
		// The answer was 2xx: the receiver has it, whatever became of
		// the rest of its body.
		rerr = nil
	}
	return resp.StatusCode, after, out.text(), rerr
}

// backoff is the wait after attempt (0-based): base doubled per attempt,
// with jitter of up to half, capped.
func backoff(base time.Duration, attempt int) time.Duration {
	d := base << min(attempt, 16)
	if d <= 0 || d > webhookBackoffMax {
		d = webhookBackoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// agentOf is the agent of task: from its TaskCreated if this observer saw
// it, else from the log when one was given, else "".
func (h *Hooks) agentOf(task string) string {
	if a, ok := h.agents.get(task); ok {
		return a
	}
	if h.cfg.Log == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(h.runCtx, 5*time.Second)
	defer cancel()
	envs, err := h.cfg.Log.Read(ctx, task, 0)
	if err != nil || len(envs) == 0 {
		h.log.Debug("hooks: the task's agent could not be read", "task", task, "err", err)
		return ""
	}
	a := agentOfGenesis(envs[0])
	h.agents.put(task, a)
	return a
}

func agentOfGenesis(env eventlog.Envelope) string {
	var p struct {
		Agent string `json:"agent"`
	}
	_ = json.Unmarshal(env.Payload, &p)
	return p.Agent
}

// agentCache remembers the agent of recently created tasks, bounded: past
// agentCacheMax it starts over.
type agentCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *agentCache) put(task, agent string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= agentCacheMax {
		c.m = make(map[string]string)
	}
	c.m[task] = agent
}

func (c *agentCache) get(task string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[task]
	return a, ok
}

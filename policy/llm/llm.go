// Package llm is what the model-backed policies (policy/openai,
// policy/anthropic) share: their settings ([Model], [Agent]), the
// bounded retry loop, the tools a model is offered beside the agent's own
// (spawn_subtask, ask_human), the transcript put in the order providers
// accept, and the reply turned into a [noeta.Decision] with its cost.
//
// A provider package implements [Provider] — one attempt of one call, on its
// official SDK — and [Policy] does the rest, identically for every provider,
// so the two cannot drift on what a reply means.
//
// The policy never returns an error for what the model or its server did:
// a call that fails for good (retries spent, a 4xx, a reply that is always
// empty) becomes a fail decision whose error says why, so the log records
// it and the task ends. Decide returns an error only when ctx ends.
package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/redact"
	"github.com/noeta-go/noeta/policy"
)

// ErrConfig is wrapped by New for a model or agent it cannot run with.
var ErrConfig = errors.New("model policy: bad config")

// Model is the model a policy sends to, and what it costs: a models: entry
// of noeta.yaml, converted by the composition layer (policy/models), or
// built in Go.
type Model struct {
	// Name names the model in messages (the entry's key in models:).
	Name string
	// Provider is the provider package's name (openai, anthropic).
	Provider string
	// Model is the provider's model name (gpt-4.1-mini, claude-sonnet-4-5).
	Model string
	// BaseURL is the API's base URL; "" is the provider's own.
	BaseURL string
	// APIKeyEnv names the environment variable holding the API key; "" is
	// the provider's usual one.
	APIKeyEnv string
	// MaxTokens bounds each reply (>= 1).
	MaxTokens int
	// TimeoutSeconds bounds each attempt of a call (>= 1).
	TimeoutSeconds int
	// MaxRetries is how many times a call is retried after a 429, a 5xx or
	// a connection error (0: never).
	MaxRetries int
	// MaxContextChars is the transcript budget in characters: past it the
	// oldest tool outputs are elided (0: DefaultMaxContextChars).
	MaxContextChars int
	// Price is what the model's tokens cost.
	Price Price
}

// DefaultMaxContextChars is the transcript budget of a Model and an Agent
// that give none.
const DefaultMaxContextChars = 200_000

// Price is a model's price per million tokens. A model has one or says it
// is free: an unpriced model would make max_cost_usd a budget that never
// spends.
type Price struct {
	// Free: the model costs nothing, said explicitly.
	Free          bool
	InputPerMTok  float64
	OutputPerMTok float64
}

// Cost is the price of a call's usage in USD.
func (p Price) Cost(inputTokens, outputTokens int64) float64 {
	if p.Free {
		return 0
	}
	return (float64(inputTokens)*p.InputPerMTok + float64(outputTokens)*p.OutputPerMTok) / 1e6
}

// Agent is what a policy tells the model for one agent.
type Agent struct {
	// Model is the Model's Name ("": not checked).
	Model string
	// SystemPrompt is the agent's system prompt.
	SystemPrompt string
	// MaxContextChars overrides the model's transcript budget (0: the
	// model's).
	MaxContextChars int
}

// Options are what a model policy takes beside its model and agent; the
// zero value is the production setting.
type Options struct {
	// HTTPClient makes the calls; nil is a client of its own with no
	// overall timeout (each attempt has the model's timeout_seconds).
	// Either way response bodies are bounded ([HTTPClient]).
	HTTPClient *http.Client
	// LookupEnv reads the API key's environment variable (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Backoff is the wait before the n-th retry (1-based); nil is
	// [DefaultBackoff]. A server's Retry-After, when longer, wins (up to
	// [MaxRetryAfter]).
	Backoff func(retry int) time.Duration
	// Now is the clock the latency is measured with (time.Now).
	Now func() time.Time
}

// MaxRetryAfter bounds how long a server's Retry-After can make a turn wait.
const MaxRetryAfter = 60 * time.Second

// DefaultBackoff waits 500ms, 1s, 2s, … up to 8s before retry n.
func DefaultBackoff(retry int) time.Duration {
	if retry < 1 {
		retry = 1
	}
	d := 500 * time.Millisecond << min(retry-1, 4)
	return min(d, 8*time.Second)
}

// Reply is one successful attempt: what the model said, in the provider's
// terms made plain.
type Reply struct {
	// Text is the reply's text, its parts joined.
	Text string
	// Calls are the tool calls the model asked for, in order.
	Calls []Call
	// Usage of this attempt.
	InputTokens, OutputTokens int64
	// Raw is the response body as the provider sent it.
	Raw []byte
	// Stop is the provider's finish/stop reason.
	Stop string
	// Truncated: the reply was cut at max_tokens.
	Truncated bool
}

// Call is a tool call as the model sent it.
type Call struct {
	Name string
	// Args is the arguments' text as sent (JSON, if the model kept to it).
	Args string
}

// Failure is what a provider says about an attempt that failed.
type Failure struct {
	// Retry: a 429, a 5xx, a timeout of the attempt, a connection error.
	Retry bool
	// Msg says what went wrong without the request's headers or the key:
	// the status and the server's message.
	Msg string
	// After is the server's Retry-After, if it gave one.
	After time.Duration
}

// Request is one call's input, provider-neutral.
type Request struct {
	Model     string
	MaxTokens int
	System    string
	// Messages are in the order providers accept (see [Arrange]).
	Messages []noeta.Message
	Tools    []noeta.ToolSpec
}

// Provider makes one attempt of a call on its SDK. Attempts run one at a
// time per Decide; a Provider must be safe for concurrent Decides.
type Provider interface {
	Send(ctx context.Context, req Request) (Reply, error)
	// Classify describes an error Send returned; the attempt's timeout
	// and ctx's end are handled before it is asked.
	Classify(ctx context.Context, err error) Failure
}

// Policy is a model-backed policy: it asks the model for each turn's
// decision.
type Policy struct {
	provider, model string
	agent           Agent
	maxTokens       int
	maxContext      int
	timeout         time.Duration
	maxRetries      int
	price           Price
	backoff         func(int) time.Duration
	now             func() time.Time
	secret          string
	p               Provider
}

// Key resolves the API key of m: the variable api_key_env names, or
// defaultEnv. A variable named by api_key_env must be set; the default one
// may be absent when base_url names another server (a local one needs no
// key). The key is returned only to be handed to the SDK.
func Key(m Model, defaultEnv string, lookup func(string) (string, bool)) (string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := m.APIKeyEnv
	if env == "" {
		env = defaultEnv
	}
	v, ok := lookup(env)
	if ok && v != "" {
		return v, nil
	}
	if m.APIKeyEnv == "" && m.BaseURL != "" {
		return "", nil
	}
	return "", fmt.Errorf("%w: model %s: the environment variable %s (its API key) is not set", ErrConfig, m.Name, env)
}

// New checks m and a for provider and returns a policy sending through p.
// key is the API key (only used to keep it out of every message).
func New(provider string, m Model, a Agent, key string, p Provider, opts Options) (*Policy, error) {
	switch {
	case m.Provider != provider:
		return nil, fmt.Errorf("%w: model %s has provider %q, not %s", ErrConfig, m.Name, m.Provider, provider)
	case m.Model == "":
		return nil, fmt.Errorf("%w: model %s names no model", ErrConfig, m.Name)
	case a.Model != "" && a.Model != m.Name:
		return nil, fmt.Errorf("%w: the agent's model is %s, not %s", ErrConfig, a.Model, m.Name)
	case m.MaxTokens < 1 || m.TimeoutSeconds < 1 || m.MaxRetries < 0:
		return nil, fmt.Errorf("%w: model %s: max_tokens and timeout_seconds must be >= 1 and max_retries >= 0 (noeta.yaml fills them in)", ErrConfig, m.Name)
	case !m.Price.Free && !(m.Price.InputPerMTok >= 0 && m.Price.OutputPerMTok >= 0):
		return nil, fmt.Errorf("%w: model %s: a price must be >= 0", ErrConfig, m.Name)
	case !m.Price.Free && m.Price.InputPerMTok == 0 && m.Price.OutputPerMTok == 0:
		// A Model built in Go without a price would make max_cost_usd a
		// budget that never spends.
		return nil, fmt.Errorf("%w: model %s has no price (set Price.Free for a free model)", ErrConfig, m.Name)
	}
	pol := &Policy{
		provider: provider, model: m.Model, agent: a, maxTokens: m.MaxTokens,
		maxContext: m.MaxContextChars, timeout: time.Duration(m.TimeoutSeconds) * time.Second,
		maxRetries: m.MaxRetries, price: m.Price, backoff: opts.Backoff, now: opts.Now, secret: key, p: p,
	}
	if a.MaxContextChars > 0 {
		pol.maxContext = a.MaxContextChars
	}
	if pol.maxContext <= 0 {
		pol.maxContext = DefaultMaxContextChars
	}
	if pol.backoff == nil {
		pol.backoff = DefaultBackoff
	}
	if pol.now == nil {
		pol.now = time.Now
	}
	return pol, nil
}

// Decide asks the model for turn in.Turn. See the package doc for what
// becomes of failures.
func (p *Policy) Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	start := p.now()
	d := noeta.Decision{Model: p.model, Provider: p.provider}
	fail := func(format string, args ...any) (noeta.Decision, error) {
		d.Kind = noeta.DecisionFail
		d.ToolCalls, d.Spawn, d.Question, d.Answer, d.Text = nil, nil, "", nil, ""
		d.Error = p.scrub(fmt.Sprintf("%s %s: ", p.provider, p.model) + fmt.Sprintf(format, args...))
		d.LatencyMS = p.now().Sub(start).Milliseconds()
		return d, nil
	}
	if in.Context == nil || len(in.Context.Messages) == 0 {
		return fail("the policy input has no transcript to send (the engine composes it from the log)")
	}
	tools, err := offered(in)
	if err != nil {
		return fail("%v", err)
	}
	t := policy.Elide(in.Context, p.maxContext)
	if t.Elided > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("transcript over %d characters: %d tool outputs elided", p.maxContext, t.Elided))
	}
	req := Request{Model: p.model, MaxTokens: p.maxTokens, System: p.agent.SystemPrompt, Messages: Arrange(t.Messages), Tools: tools}

	var reply Reply
	for attempt := 1; ; attempt++ {
		r, err := p.attempt(ctx, req)
		if err == nil {
			// Every reply the server sent is paid for, a useless one too.
			d.InputTokens += r.InputTokens
			d.OutputTokens += r.OutputTokens
			if r.Text != "" || len(r.Calls) > 0 {
				reply = r
				break
			}
			err = errEmpty
		}
		if ctx.Err() != nil {
			return noeta.Decision{}, context.Cause(ctx)
		}
		var f Failure
		switch {
		case errors.Is(err, errEmpty):
			f = Failure{Retry: true, Msg: "an empty reply (no text, no tool calls)"}
		case errors.Is(err, errTimeout):
			f = Failure{Retry: true, Msg: err.Error()}
		case isFinal(err):
			f = Failure{Msg: err.Error()}
		default:
			f = p.p.Classify(ctx, err)
		}
		msg := p.scrub(f.Msg)
		if !f.Retry {
			d.CostUSD = p.price.Cost(d.InputTokens, d.OutputTokens)
			return fail("%s", msg)
		}
		if attempt > p.maxRetries {
			d.CostUSD = p.price.Cost(d.InputTokens, d.OutputTokens)
			return fail("%s; gave up after %d attempts (max_retries: %d)", msg, attempt, p.maxRetries)
		}
		d.Notes = append(d.Notes, fmt.Sprintf("attempt %d: %s; retrying", attempt, msg))
		wait := p.backoff(attempt)
		if f.After > wait {
			wait = min(f.After, MaxRetryAfter)
		}
		if err := sleep(ctx, wait); err != nil {
			return noeta.Decision{}, err
		}
	}
	if reply.Truncated {
		d.Notes = append(d.Notes, fmt.Sprintf("the reply was cut at max_tokens (%d)", p.maxTokens))
	}
	d.LatencyMS = p.now().Sub(start).Milliseconds()
	d.CostUSD = p.price.Cost(d.InputTokens, d.OutputTokens)
	d.Response = reply.Raw
	return decide(d, reply, in), nil
}

var errEmpty = errors.New("empty reply")

// attempt is one Send under the model's timeout.
func (p *Policy) attempt(ctx context.Context, req Request) (Reply, error) {
	actx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	r, err := p.p.Send(actx, req)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		return r, fmt.Errorf("%w: no reply within timeout_seconds (%s)", errTimeout, p.timeout)
	}
	return r, err
}

var errTimeout = errors.New("timeout")

// ErrRequest is wrapped by a Provider's Send for a request it cannot build
// from the input (a tool schema that is not an object): never retried.
var ErrRequest = errors.New("cannot build the request")

// IsTimeout reports an attempt cut by the model's timeout.
func IsTimeout(err error) bool { return errors.Is(err, errTimeout) }

// scrub removes the API key from a message, in case a server or a library
// echoed it: it is never recorded. A key too short to be a secret is left
// (redact.Secrets): replacing a one-character key everywhere mangled every
// message.
func (p *Policy) scrub(s string) string {
	return redact.Secrets(s, redact.Mark, p.secret)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// StatusFailure describes an HTTP error status: 408, 409, 429 and 5xx are
// retried (with the response's Retry-After, in seconds, if any); others are
// final. msg is the server's message.
func StatusFailure(status int, msg string, res *http.Response) Failure {
	text := fmt.Sprintf("HTTP %d", status)
	if st := http.StatusText(status); st != "" {
		text += " " + st
	}
	if msg != "" {
		text += ": " + msg
	}
	f := Failure{Retry: status == 408 || status == 409 || status == 429 || status >= 500, Msg: text}
	if res != nil {
		if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && n > 0 {
			f.After = time.Duration(n) * time.Second
		}
	}
	return f
}

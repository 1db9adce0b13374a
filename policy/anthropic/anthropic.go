// Package anthropic is a model-backed policy on the Anthropic Messages API
// with tool use, through the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2).
//
// What is shared with the other providers — retries, the tools offered, what
// a reply means, cost — is package policy/llm; this package maps a
// transcript to a request and a response to a reply.
//
// The client is built without the SDK's environment defaults: the API key
// comes from the variable the config names (or ANTHROPIC_API_KEY) and from
// nowhere else — not ANTHROPIC_AUTH_TOKEN, a profile or federation — and the
// base URL from the config, so a process cannot send to a server, or with a
// credential, its config does not name.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/llm"
)

// Provider is the provider name recorded in each decision.
const Provider = "anthropic"

// DefaultAPIKeyEnv is the key's variable when api_key_env is not given.
const DefaultAPIKeyEnv = "ANTHROPIC_API_KEY"

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com/"

// Options are the policy's options beside its model and agent.
type Options = llm.Options

// Policy decides each turn by asking an Anthropic model.
type Policy struct {
	*llm.Policy
}

// New returns the policy of agent a on model m. The API key is read now,
// from the variable m names (or ANTHROPIC_API_KEY); it may be absent only
// when m has a base_url.
func New(m llm.Model, a llm.Agent, opts Options) (*Policy, error) {
	key, err := llm.Key(m, DefaultAPIKeyEnv, opts.LookupEnv)
	if err != nil {
		return nil, err
	}
	base := m.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	hc := llm.HTTPClient(opts.HTTPClient)
	ropts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(hc),
		option.WithBaseURL(base),
		// Retries are the policy's: bounded, and each one noted.
		option.WithMaxRetries(0),
	}
	if key != "" {
		ropts = append(ropts, option.WithAPIKey(key))
	}
	c := &client{svc: sdk.NewClient(ropts...).Messages}
	p, err := llm.New(Provider, m, a, key, c, opts)
	if err != nil {
		return nil, err
	}
	return &Policy{p}, nil
}

type client struct{ svc sdk.MessageService }

func (c *client) Send(ctx context.Context, req llm.Request) (llm.Reply, error) {
	params, err := request(req)
	if err != nil {
		return llm.Reply{}, fmt.Errorf("%w: %v", llm.ErrRequest, err)
	}
	res, err := c.svc.New(ctx, params)
	if err != nil {
		return llm.Reply{}, err
	}
	return reply(res), nil
}

// request maps a provider-neutral request to Messages. Consecutive
// messages of one role are one message (the API alternates roles); a tool
// result is a tool_result block of a user message, before its text blocks
// (the API wants the results first).
func request(req llm.Request) (sdk.MessageNewParams, error) {
	p := sdk.MessageNewParams{Model: sdk.Model(req.Model), MaxTokens: int64(req.MaxTokens)}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	var (
		role          noeta.MessageRole
		results, rest []sdk.ContentBlockParamUnion
	)
	flush := func() {
		blocks := append(results, rest...)
		if len(blocks) == 0 {
			return
		}
		if role == noeta.RoleAssistant {
			p.Messages = append(p.Messages, sdk.NewAssistantMessage(blocks...))
		} else {
			p.Messages = append(p.Messages, sdk.NewUserMessage(blocks...))
		}
		results, rest = nil, nil
	}
	for _, m := range req.Messages {
		r := m.Role
		if r == noeta.RoleTool {
			r = noeta.RoleUser
		}
		if r != role {
			flush()
			role = r
		}
		switch m.Role {
		case noeta.RoleUser:
			rest = append(rest, sdk.NewTextBlock(nonEmpty(m.Text)))
		case noeta.RoleTool:
			results = append(results, sdk.NewToolResultBlock(m.ToolCallID, nonEmpty(m.Text), m.IsError))
		case noeta.RoleAssistant:
			if m.Text != "" {
				rest = append(rest, sdk.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				args := tc.Args
				if len(args) == 0 || args[0] != '{' {
					args = json.RawMessage("{}")
				}
				rest = append(rest, sdk.NewToolUseBlock(tc.CallID, args, llm.HistoryToolName(tc.Tool)))
			}
		default:
			return p, fmt.Errorf("a transcript message has role %q", m.Role)
		}
	}
	flush()
	for _, t := range req.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema == nil {
			return p, fmt.Errorf("tool %s: its input schema is not a JSON object", t.Name)
		}
		in := sdk.ToolInputSchemaParam{Properties: schema["properties"]}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		for k, v := range schema {
			switch k {
			case "type", "properties", "required":
			default:
				if in.ExtraFields == nil {
					in.ExtraFields = map[string]any{}
				}
				in.ExtraFields[k] = v
			}
		}
		tool := sdk.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tool.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// nonEmpty: the API refuses an empty text block.
func nonEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

func reply(res *sdk.Message) llm.Reply {
	u := res.Usage
	r := llm.Reply{
		// Cache reads and writes are input too: the budget counts them at
		// the input price rather than not at all.
		InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens,
		Raw:          []byte(res.RawJSON()),
		Stop:         string(res.StopReason),
		Truncated:    res.StopReason == "max_tokens",
	}
	for _, b := range res.Content {
		switch b.Type {
		case "text":
			r.Text += b.Text
		case "tool_use":
			r.Calls = append(r.Calls, llm.Call{Name: b.Name, Args: string(b.Input)})
		}
	}
	return r
}

// Classify: 408, 409, 429 and 5xx (529 overloaded included) are retried,
// and so is an error that is not an HTTP status (a refused or broken
// connection); other statuses are final. The message is the status and the
// server's message, never the request.
func (c *client) Classify(_ context.Context, err error) llm.Failure {
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		return llm.Failure{Retry: true, Msg: "connection error: " + err.Error()}
	}
	return llm.StatusFailure(apiErr.StatusCode, apiErr.Message, apiErr.Response)
}

// Package openai is a model-backed policy on the OpenAI Chat Completions
// API with tools, through the official SDK (github.com/openai/openai-go/v3).
// With base_url it speaks to any OpenAI-compatible server: vLLM, Ollama,
// llama.cpp's server, LiteLLM.
//
// What is shared with the other providers — retries, the tools offered, what
// a reply means, cost — is package policy/llm; this package maps a
// transcript to a request and a response to a reply.
//
// The client reads nothing from the environment but the API key's variable:
// OPENAI_BASE_URL, OPENAI_ORG_ID and the like would make a process send to a
// server, or as an organisation, its config does not name.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/llm"
)

// Provider is the provider name recorded in each decision.
const Provider = "openai"

// DefaultAPIKeyEnv is the key's variable when api_key_env is not given.
const DefaultAPIKeyEnv = "OPENAI_API_KEY"

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1/"

// Options are the policy's options beside its model and agent.
type Options = llm.Options

// Policy decides each turn by asking an OpenAI-compatible model.
type Policy struct {
	*llm.Policy
}

// New returns the policy of agent a on model m. The API key is read now,
// from the variable m names (or OPENAI_API_KEY); it may be absent only when
// m has a base_url (local servers need none).
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
		option.WithHTTPClient(hc),
		option.WithBaseURL(base),
		// Retries are the policy's: bounded, and each one noted.
		option.WithMaxRetries(0),
	}
	if key != "" {
		ropts = append(ropts, option.WithAPIKey(key))
	}
	c := &client{svc: sdk.NewChatCompletionService(ropts...), compatible: m.BaseURL != ""}
	p, err := llm.New(Provider, m, a, key, c, opts)
	if err != nil {
		return nil, err
	}
	return &Policy{p}, nil
}

type client struct {
	svc sdk.ChatCompletionService
	// compatible: another server than OpenAI's, which may know only the
	// older max_tokens.
	compatible bool
}

func (c *client) Send(ctx context.Context, req llm.Request) (llm.Reply, error) {
	params, err := request(req, c.compatible)
	if err != nil {
		return llm.Reply{}, fmt.Errorf("%w: %v", llm.ErrRequest, err)
	}
	res, err := c.svc.New(ctx, params)
	if err != nil {
		return llm.Reply{}, err
	}
	return reply(res), nil
}

// request maps a provider-neutral request to Chat Completions.
func request(req llm.Request, compatible bool) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{Model: shared.ChatModel(req.Model)}
	if compatible {
		p.MaxTokens = sdk.Int(int64(req.MaxTokens))
	} else {
		p.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case noeta.RoleUser:
			p.Messages = append(p.Messages, sdk.UserMessage(m.Text))
		case noeta.RoleAssistant:
			if m.Text == "" && len(m.ToolCalls) == 0 {
				continue // the API refuses an assistant message of nothing
			}
			var a sdk.ChatCompletionAssistantMessageParam
			if m.Text != "" {
				a.Content.OfString = sdk.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Args)
				if len(tc.Args) == 0 {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.CallID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: llm.HistoryToolName(tc.Tool), Arguments: args},
					},
				})
			}
			p.Messages = append(p.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case noeta.RoleTool:
			// Chat Completions has no error flag on a tool result: the
			// text says it.
			text := m.Text
			if m.IsError {
				text = "[error] " + text
			}
			p.Messages = append(p.Messages, sdk.ToolMessage(text, m.ToolCallID))
		default:
			return p, fmt.Errorf("a transcript message has role %q", m.Role)
		}
	}
	for _, t := range req.Tools {
		var params shared.FunctionParameters
		if err := json.Unmarshal(t.InputSchema, &params); err != nil || params == nil {
			return p, fmt.Errorf("tool %s: its input schema is not a JSON object", t.Name)
		}
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			def.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(def))
	}
	return p, nil
}

func reply(res *sdk.ChatCompletion) llm.Reply {
	r := llm.Reply{
		InputTokens:  res.Usage.PromptTokens,
		OutputTokens: res.Usage.CompletionTokens,
		Raw:          []byte(res.RawJSON()),
	}
	if len(res.Choices) == 0 {
		return r
	}
	ch := res.Choices[0]
	r.Stop = ch.FinishReason
	r.Truncated = ch.FinishReason == "length"
	r.Text = ch.Message.Content
	if r.Text == "" && ch.Message.Refusal != "" {
		r.Text = ch.Message.Refusal
	}
	for _, tc := range ch.Message.ToolCalls {
		switch tc.Type {
		case "custom":
			r.Calls = append(r.Calls, llm.Call{Name: tc.Custom.Name, Args: tc.Custom.Input})
		default:
			r.Calls = append(r.Calls, llm.Call{Name: tc.Function.Name, Args: tc.Function.Arguments})
		}
	}
	return r
}

// Classify: 408, 409, 429 and 5xx are retried, and so is an error that is
// not an HTTP status (a refused or broken connection); other statuses are
// final. The message is the status and the server's message, never the
// request.
func (c *client) Classify(_ context.Context, err error) llm.Failure {
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		return llm.Failure{Retry: true, Msg: "connection error: " + err.Error()}
	}
	return llm.StatusFailure(apiErr.StatusCode, apiErr.Message, apiErr.Response)
}

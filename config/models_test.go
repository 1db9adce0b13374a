package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// issueConfig is the models:/agents: example of issue 14, verbatim.
const issueConfig = `
models:
  fast:
    provider: openai                 # openai | anthropic
    model: gpt-4.1-mini
    base_url: http://127.0.0.1:8080/v1   # optional
    api_key_env: OPENAI_API_KEY          # optional; the provider's usual variable by default
    max_tokens: 2048                     # optional
    price: {input_per_mtok: 0.40, output_per_mtok: 1.60}   # or: price: free
agents:
  researcher:
    model: fast
    system_prompt: "You are a careful research assistant."
    tools: [read_file, echo, shell]
    budget: {max_cost_usd: 0.50}
`

func TestParseModels(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(issueConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Model{"fast": {
		Name: "fast", Provider: ProviderOpenAI, Model: "gpt-4.1-mini", BaseURL: "http://127.0.0.1:8080/v1",
		APIKeyEnv: "OPENAI_API_KEY", MaxTokens: 2048, TimeoutSeconds: DefaultTimeoutSeconds,
		MaxRetries: DefaultMaxRetries, MaxContextChars: DefaultMaxContextChars,
		Price: Price{InputPerMTok: 0.40, OutputPerMTok: 1.60},
	}}
	if !reflect.DeepEqual(f.Models, want) {
		t.Errorf("Models = %+v\nwant %+v", f.Models, want)
	}
	wantAgents := map[string]AgentModel{"researcher": {Model: "fast", SystemPrompt: "You are a careful research assistant."}}
	if !reflect.DeepEqual(f.AgentModels, wantAgents) {
		t.Errorf("AgentModels = %+v, want %+v", f.AgentModels, wantAgents)
	}
	// The governance part of the agent is still read.
	if a, ok := f.Governance.Agent("researcher"); !ok || a.Budget.MaxCostUSD == nil || *a.Budget.MaxCostUSD != 0.50 {
		t.Errorf("researcher's governance = %+v, %v", a, ok)
	}
}

func TestParseModelsOptionalKeys(t *testing.T) {
	doc := `
models:
  local: {provider: openai, model: qwen, price: free}
  claude:
    provider: anthropic
    model: claude-sonnet-4-5
    timeout_seconds: 30
    max_retries: 0
    max_context_chars: 5000
    price: {input_per_mtok: 3, output_per_mtok: 15}
agents:
  a: {model: local, max_context_chars: 1000}
  b: {model: claude}
  scripted: {tools: [echo]}
`
	f, err := Parse("", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	local := Model{Name: "local", Provider: ProviderOpenAI, Model: "qwen", MaxTokens: DefaultMaxTokens,
		TimeoutSeconds: DefaultTimeoutSeconds, MaxRetries: DefaultMaxRetries, MaxContextChars: DefaultMaxContextChars,
		Price: Price{Free: true}}
	claude := Model{Name: "claude", Provider: ProviderAnthropic, Model: "claude-sonnet-4-5", MaxTokens: DefaultMaxTokens,
		TimeoutSeconds: 30, MaxRetries: 0, MaxContextChars: 5000, Price: Price{InputPerMTok: 3, OutputPerMTok: 15}}
	if got := f.Models["local"]; !reflect.DeepEqual(got, local) {
		t.Errorf("local = %+v, want %+v", got, local)
	}
	if got := f.Models["claude"]; !reflect.DeepEqual(got, claude) {
		t.Errorf("claude = %+v, want %+v", got, claude)
	}
	want := map[string]AgentModel{"a": {Model: "local", MaxContextChars: 1000}, "b": {Model: "claude"}}
	if !reflect.DeepEqual(f.AgentModels, want) {
		t.Errorf("AgentModels = %+v, want %+v (an agent without model: is absent)", f.AgentModels, want)
	}
}

func TestPriceCost(t *testing.T) {
	tests := []struct {
		p       Price
		in, out int64
		want    float64
	}{
		{Price{InputPerMTok: 0.40, OutputPerMTok: 1.60}, 1_000_000, 0, 0.40},
		{Price{InputPerMTok: 0.40, OutputPerMTok: 1.60}, 0, 1_000_000, 1.60},
		{Price{InputPerMTok: 3, OutputPerMTok: 15}, 1000, 500, 0.0105},
		{Price{Free: true}, 1_000_000, 1_000_000, 0},
	}
	for _, tt := range tests {
		if got := tt.p.Cost(tt.in, tt.out); got < tt.want-1e-12 || got > tt.want+1e-12 {
			t.Errorf("%+v.Cost(%d, %d) = %v, want %v", tt.p, tt.in, tt.out, got, tt.want)
		}
	}
}

// TestParseModelsErrors: every mistake of models: and of an agent's model
// keys is refused with its path and line. The governance case is an
// unpriced model: read as $0 it would make max_cost_usd a budget that a
// model-backed agent never spends.
func TestParseModelsErrors(t *testing.T) {
	tests := []struct {
		name, yaml, path, msg string
		line                  int
	}{
		{"no price", "models:\n  m:\n    provider: openai\n    model: x\n", "models.m.price", "required", 2},
		{"price null", "models:\n  m:\n    provider: openai\n    model: x\n    price: ~\n", "models.m.price", "required", 5},
		{"price zero-ish word", "models:\n  m:\n    provider: openai\n    model: x\n    price: none\n", "models.m.price", `must be free or a mapping, not "none"`, 5},
		{"price zero", "models:\n  m:\n    provider: openai\n    model: x\n    price: {input_per_mtok: 0, output_per_mtok: 0.0}\n", "models.m.price", "write price: free", 5},
		{"price half", "models:\n  m:\n    provider: openai\n    model: x\n    price: {input_per_mtok: 1}\n", "models.m.price.output_per_mtok", "required", 5},
		{"price negative", "models:\n  m:\n    provider: openai\n    model: x\n    price: {input_per_mtok: -1, output_per_mtok: 1}\n", "models.m.price.input_per_mtok", "must be >= 0", 5},
		{"price not a number", "models:\n  m:\n    provider: openai\n    model: x\n    price: {input_per_mtok: cheap, output_per_mtok: 1}\n", "models.m.price.input_per_mtok", "must be a number", 5},
		{"price unknown key", "models:\n  m:\n    provider: openai\n    model: x\n    price: {input: 1, output_per_mtok: 1}\n", "models.m.price.input", "unknown key", 5},
		{"no provider", "models:\n  m: {model: x, price: free}\n", "models.m.provider", "required", 2},
		{"bad provider", "models:\n  m:\n    provider: gemini\n    model: x\n    price: free\n", "models.m.provider", `must be openai or anthropic, not "gemini"`, 3},
		{"no model", "models:\n  m:\n    provider: openai\n    price: free\n", "models.m.model", "required", 2},
		{"empty model", "models:\n  m:\n    provider: openai\n    model: ''\n    price: free\n", "models.m.model", "required", 4},
		{"bad base_url", "models:\n  m:\n    provider: openai\n    model: x\n    base_url: 127.0.0.1:8080\n    price: free\n", "models.m.base_url", "http:// or https://", 5},
		{"max_tokens zero", "models:\n  m:\n    provider: openai\n    model: x\n    max_tokens: 0\n    price: free\n", "models.m.max_tokens", "must be from 1", 5},
		{"timeout zero", "models:\n  m:\n    provider: openai\n    model: x\n    timeout_seconds: 0\n    price: free\n", "models.m.timeout_seconds", "must be from 1", 5},
		{"retries too many", "models:\n  m:\n    provider: openai\n    model: x\n    max_retries: 100\n    price: free\n", "models.m.max_retries", "must be from 0 to 10", 5},
		{"unknown key", "models:\n  m:\n    provider: openai\n    model: x\n    api_key: sk-abc\n    price: free\n", "models.m.api_key", "unknown key", 5},
		{"models not a mapping", "models: [a]\n", "models", "must be a mapping", 1},
		{"agent names unknown model", "models:\n  fast: {provider: openai, model: x, price: free}\nagents:\n  a:\n    model: slow\n", "agents.a.model", `"slow" names no model of models: (the models: fast)`, 5},
		{"agent model empty", "agents:\n  a:\n    model: ''\n", "agents.a.model", "must name a model", 3},
		{"system_prompt without model", "agents:\n  a:\n    system_prompt: hi\n", "agents.a.system_prompt", "model: is not", 3},
		{"agent max_context_chars without model", "agents:\n  a:\n    max_context_chars: 10\n", "agents.a.max_context_chars", "model: is not", 3},
		{"agent max_context_chars zero", "models:\n  m: {provider: openai, model: x, price: free}\nagents:\n  a:\n    model: m\n    max_context_chars: 0\n", "agents.a.max_context_chars", "must be from 1", 6},
		{"system_prompt not a string", "models:\n  m: {provider: openai, model: x, price: free}\nagents:\n  a:\n    model: m\n    system_prompt: [a]\n", "agents.a.system_prompt", "must be a string", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			list := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				list = j.Unwrap()
			}
			found := false
			for _, e := range list {
				ce := e.(*Error)
				if ce.Path == tt.path && ce.Line == tt.line && strings.Contains(ce.Msg, tt.msg) && ce.File == "noeta.yaml" {
					found = true
				}
			}
			if !found {
				t.Errorf("err = %q, want one at path %q line %d of noeta.yaml, with %q", err, tt.path, tt.line, tt.msg)
			}
		})
	}
}

// TestParseModelsKeyNeverEchoed: a key pasted into api_key_env by mistake
// is refused without being repeated in the error, which reaches terminals
// and logs.
func TestParseModelsKeyNeverEchoed(t *testing.T) {
	const key = "sk-proj-SECRET0123456789"
	_, err := Parse("noeta.yaml", []byte("models:\n  m:\n    provider: openai\n    model: x\n    api_key_env: "+key+"\n    price: free\n"))
	if err == nil {
		t.Fatal("a key in api_key_env was accepted")
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("the error repeats the key: %q", err)
	}
	if !strings.Contains(err.Error(), "models.m.api_key_env") {
		t.Errorf("the error does not name the field: %q", err)
	}
}

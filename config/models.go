package config

import (
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Model providers.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Defaults of a [Model]'s optional keys.
const (
	DefaultMaxTokens       = 4096
	DefaultTimeoutSeconds  = 120
	DefaultMaxRetries      = 3
	DefaultMaxContextChars = 200_000

	// maxRetriesLimit bounds max_retries: a retry loop is a cost and a
	// latency the operator must be able to reason about.
	maxRetriesLimit = 10
)

// Model is one entry of the models: section: which provider and model an
// agent's decisions come from, and what they cost.
//
// Only the name of the environment variable holding the API key is kept,
// never the key: a File may be printed, logged or compared.
type Model struct {
	// Name is the entry's key in models:.
	Name string
	// Provider is ProviderOpenAI or ProviderAnthropic.
	Provider string
	// Model is the provider's model name (gpt-4.1-mini, claude-sonnet-4-5).
	Model string
	// BaseURL is the API's base URL; "" is the provider's own. For openai,
	// any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LiteLLM).
	BaseURL string
	// APIKeyEnv names the environment variable holding the API key; "" is
	// the provider's usual one (OPENAI_API_KEY, ANTHROPIC_API_KEY).
	APIKeyEnv string
	// MaxTokens bounds each reply (DefaultMaxTokens).
	MaxTokens int
	// TimeoutSeconds bounds each attempt of a call (DefaultTimeoutSeconds).
	TimeoutSeconds int
	// MaxRetries is how many times a call is retried after a 429, a 5xx or
	// a connection error (DefaultMaxRetries; 0: never).
	MaxRetries int
	// MaxContextChars is the transcript budget in characters: past it the
	// oldest tool outputs are elided (DefaultMaxContextChars).
	MaxContextChars int
	// Price is what the model's tokens cost.
	Price Price
}

// Price is a model's price per million tokens. A model has one or says it
// is free: an unpriced model would make max_cost_usd a budget that never
// spends.
type Price struct {
	// Free is price: free, given explicitly.
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

// AgentModel is an agent's model keys: which model decides for it and what
// it is told.
type AgentModel struct {
	// Model is a name in models:.
	Model string
	// SystemPrompt is the agent's system prompt.
	SystemPrompt string
	// MaxContextChars overrides the model's transcript budget (0: the
	// model's).
	MaxContextChars int
}

// envName is what a POSIX shell accepts as a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (d *decoder) models(n *yaml.Node, path string) map[string]Model {
	if n = d.enter(n, path); n == nil {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]Model, len(ps))
	for _, p := range ps {
		mp := join(path, p.key)
		d.mark(mp, p.keyN)
		if p.key == "" {
			d.errs.add(mp, "a model needs a name")
			continue
		}
		f, ok := d.fields(p.value, mp, "provider", "model", "base_url", "api_key_env", "max_tokens",
			"timeout_seconds", "max_retries", "max_context_chars", "price")
		if !ok && f == nil {
			continue
		}
		m := Model{Name: p.key, MaxTokens: DefaultMaxTokens, TimeoutSeconds: DefaultTimeoutSeconds,
			MaxRetries: DefaultMaxRetries, MaxContextChars: DefaultMaxContextChars}
		switch s, ok := d.str(f["provider"], join(mp, "provider")); {
		case !ok && isNull(f["provider"]):
			d.errs.add(join(mp, "provider"), "required (openai or anthropic)")
		case ok && s != ProviderOpenAI && s != ProviderAnthropic:
			d.errs.addf(join(mp, "provider"), "must be openai or anthropic, not %q", s)
		default:
			m.Provider = s
		}
		if s, ok := d.str(f["model"], join(mp, "model")); ok && s != "" {
			m.Model = s
		} else if ok || isNull(f["model"]) {
			d.errs.add(join(mp, "model"), "required: the provider's model name")
		}
		if s, ok := d.str(f["base_url"], join(mp, "base_url")); ok {
			m.BaseURL = s
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.errs.addf(join(mp, "base_url"), "must be an http:// or https:// URL with a host, not %q", s)
			}
		}
		if s, ok := d.str(f["api_key_env"], join(mp, "api_key_env")); ok {
			// The value is never echoed: a key pasted here by mistake must
			// not reach a terminal or a log through this error.
			if !envName.MatchString(s) {
				d.errs.add(join(mp, "api_key_env"), "must be the name of an environment variable (letters, digits and _), not the key itself")
			} else {
				m.APIKeyEnv = s
			}
		}
		d.bounded(f["max_tokens"], join(mp, "max_tokens"), 1, 1<<24, &m.MaxTokens)
		d.bounded(f["timeout_seconds"], join(mp, "timeout_seconds"), 1, 3600, &m.TimeoutSeconds)
		d.bounded(f["max_retries"], join(mp, "max_retries"), 0, maxRetriesLimit, &m.MaxRetries)
		d.bounded(f["max_context_chars"], join(mp, "max_context_chars"), 1, math.MaxInt32, &m.MaxContextChars)
		m.Price = d.price(f["price"], join(mp, "price"))
		out[p.key] = m
	}
	return out
}

// bounded reads an optional integer in [lo, hi] into dst.
func (d *decoder) bounded(n *yaml.Node, path string, lo, hi int, dst *int) {
	v, _ := d.integer(n, path)
	if v == nil {
		return
	}
	if *v < lo || *v > hi {
		d.errs.addf(path, "must be from %d to %d, not %d", lo, hi, *v)
		return
	}
	*dst = *v
}

// price reads price: free, or {input_per_mtok, output_per_mtok}; absent is
// an error.
func (d *decoder) price(n *yaml.Node, path string) Price {
	const how = "give price: {input_per_mtok: N, output_per_mtok: N} in USD per million tokens, or price: free"
	if isNull(n) {
		d.errs.add(path, "required: a model without a price would make max_cost_usd never spend; "+how)
		return Price{}
	}
	if n.Kind == yaml.ScalarNode {
		if s, ok := d.str(n, path); ok {
			if s == "free" {
				return Price{Free: true}
			}
			d.errs.addf(path, "must be free or a mapping, not %q; %s", s, how)
		}
		return Price{}
	}
	f, ok := d.fields(n, path, "input_per_mtok", "output_per_mtok")
	if !ok && f == nil {
		return Price{}
	}
	var p Price
	for _, k := range []struct {
		key string
		dst *float64
	}{{"input_per_mtok", &p.InputPerMTok}, {"output_per_mtok", &p.OutputPerMTok}} {
		kp := join(path, k.key)
		v, ok := d.number(f[k.key], kp)
		switch {
		case v == nil && ok:
			d.errs.addf(kp, "required; %s", how)
		case v != nil && !(*v >= 0):
			d.errs.addf(kp, "must be >= 0, not %v", *v)
		case v != nil:
			*k.dst = *v
		}
	}
	if f["input_per_mtok"] != nil && f["output_per_mtok"] != nil && p.InputPerMTok == 0 && p.OutputPerMTok == 0 {
		// One spelling of "costs nothing", so that a zero price is always
		// a choice someone wrote down.
		d.errs.add(path, "both prices are 0: write price: free")
	}
	return p
}

// agentModel reads an agent's model keys; ok is false when it names no
// model.
func (d *decoder) agentModel(f map[string]*yaml.Node, ap string) (AgentModel, bool) {
	var a AgentModel
	name, hasModel := d.str(f["model"], join(ap, "model"))
	if hasModel && name == "" {
		d.errs.add(join(ap, "model"), "must name a model of models:, not be empty")
		hasModel = false
	}
	a.Model = name
	prompt, hasPrompt := d.str(f["system_prompt"], join(ap, "system_prompt"))
	a.SystemPrompt = prompt
	d.bounded(f["max_context_chars"], join(ap, "max_context_chars"), 1, math.MaxInt32, &a.MaxContextChars)
	if !hasModel {
		// The keys of a model-backed agent on an agent without a model
		// would be silently unused.
		if hasPrompt {
			d.errs.add(join(ap, "system_prompt"), "is given but model: is not; name a model of models:")
		}
		if a.MaxContextChars != 0 {
			d.errs.add(join(ap, "max_context_chars"), "is given but model: is not; name a model of models:")
		}
		return AgentModel{}, false
	}
	return a, true
}

// checkAgentModels refuses an agent naming a model that models: lacks.
func checkAgentModels(agents map[string]AgentModel, models map[string]Model, errs *errorList) {
	for name, a := range agents {
		if _, ok := models[a.Model]; !ok {
			known := make([]string, 0, len(models))
			for k := range models {
				known = append(known, k)
			}
			slices.Sort(known)
			msg := "names no model of models:"
			if len(known) > 0 {
				msg += " (the models: " + strings.Join(known, ", ") + ")"
			}
			errs.addf(join(join("agents", name), "model"), "%q %s", a.Model, msg)
		}
	}
}

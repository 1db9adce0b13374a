package models_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/models"
)

const doc = `
models:
  gpt: {provider: openai, model: gpt-4.1-mini, price: {input_per_mtok: 0.4, output_per_mtok: 1.6}}
  claude: {provider: anthropic, model: claude-sonnet-4-5, api_key_env: MY_CLAUDE_KEY, price: free}
agents:
  a: {model: gpt}
  b: {model: claude}
  scripted: {tools: [echo]}
`

func TestForAgent(t *testing.T) {
	f, err := config.Parse("noeta.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	env := func(name string) (string, bool) {
		return "k", name == "OPENAI_API_KEY" || name == "MY_CLAUDE_KEY"
	}
	for _, agent := range []string{"a", "b"} {
		if p, err := models.ForAgent(f, agent, llm.Options{LookupEnv: env}); err != nil || p == nil {
			t.Errorf("ForAgent(%s) = %v, %v", agent, p, err)
		}
	}
	if _, err := models.ForAgent(f, "scripted", llm.Options{LookupEnv: env}); !errors.Is(err, models.ErrNoModel) {
		t.Errorf("ForAgent(scripted) = %v, want ErrNoModel", err)
	}
	// The key's variable is read at construction: a missing key is an
	// error now, not a failed turn later.
	if _, err := models.ForAgent(f, "b", llm.Options{LookupEnv: func(string) (string, bool) { return "", false }}); !errors.Is(err, llm.ErrConfig) {
		t.Errorf("ForAgent without the key = %v, want ErrConfig", err)
	}
}

// TestConversionCarriesEveryField: every field of the config's model types
// reaches the providers' options with its value, so a key added to
// models: cannot be dropped on the way (a price lost would make a budget
// that never spends).
func TestConversionCarriesEveryField(t *testing.T) {
	m := config.Model{Name: "n", Provider: "p", Model: "m", BaseURL: "http://b", APIKeyEnv: "K",
		MaxTokens: 1, TimeoutSeconds: 2, MaxRetries: 3, MaxContextChars: 4,
		Price: config.Price{Free: true, InputPerMTok: 5, OutputPerMTok: 6}}
	a := config.AgentModel{Model: "m", SystemPrompt: "s", MaxContextChars: 7}
	for _, c := range []struct{ from, to any }{
		{m, models.Model(m)}, {m.Price, models.Model(m).Price}, {a, models.Agent(a)},
	} {
		from, to := reflect.ValueOf(c.from), reflect.ValueOf(c.to)
		if from.NumField() != to.NumField() {
			t.Errorf("%T has %d fields, %T %d", c.from, from.NumField(), c.to, to.NumField())
		}
		for i := range from.NumField() {
			name := from.Type().Field(i).Name
			f, g := from.Field(i), to.FieldByName(name)
			if f.IsZero() {
				t.Errorf("%T.%s is zero in the test: set it", c.from, name)
			}
			if !g.IsValid() {
				t.Errorf("%T has no field %s", c.to, name)
				continue
			}
			if f.Kind() != reflect.Struct && f.Interface() != g.Interface() {
				t.Errorf("%s: %v became %v", name, f.Interface(), g.Interface())
			}
		}
	}
}

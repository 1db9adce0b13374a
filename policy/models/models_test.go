package models_test

import (
	"errors"
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

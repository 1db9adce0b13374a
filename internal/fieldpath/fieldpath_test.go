package fieldpath

import "testing"

func TestJoinAndParent(t *testing.T) {
	for _, tt := range []struct {
		path, parent string
	}{
		{Join("", "agents"), ""},
		{Join(Join("", "agents"), "researcher"), "agents"},
		{Join(Join("", "agents"), "my agent"), "agents"},
		{Join(Join("", "agents"), `a."b`), "agents"},
		{Index(Join("", "rules"), 2), "rules"},
		{Join(Index(Join("", "rules"), 2), "match_arg"), "rules[2]"},
	} {
		if got := Parent(tt.path); got != tt.parent {
			t.Errorf("Parent(%q) = %q, want %q", tt.path, got, tt.parent)
		}
	}
	if got := Join(Join("", "agents"), "my agent"); got != `agents."my agent"` {
		t.Errorf("a key with a space: %s", got)
	}
	if got := Join("", ""); got != `""` {
		t.Errorf("an empty key: %s", got)
	}
}

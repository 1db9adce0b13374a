package tools

import (
	"encoding/json"
	"testing"
)

type sampleArgs struct {
	Path    string   `json:"path" args:"required"`
	Count   int      `json:"count"`
	Ratio   *float64 `json:"ratio"`
	Flag    bool     `json:"flag"`
	List    []string `json:"list"`
	Ignored string   `json:"-"`
	hidden  string
}

func TestDecodeArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, args, want string
	}{
		{"ok", `{"path":"a","count":2,"ratio":0.5,"flag":true,"list":["x"]}`, ""},
		{"whitespace", " \n{ \"path\" : \"a\" } ", ""},
		{"missing required", `{"count":1}`, "t: args.path is required"},
		{"null required", `{"path":null}`, "t: args.path is required"},
		{"empty args", ``, "t: args.path is required"},
		{"null args", `null`, "t: args.path is required"},
		{"unknown member", `{"path":"a","colour":"red","bogus":1}`, `t: unknown argument "bogus" (want count, flag, list, path, ratio)`},
		{"dash-tagged field is not an argument", `{"path":"a","Ignored":"x"}`, `t: unknown argument "Ignored" (want count, flag, list, path, ratio)`},
		{"unexported field is not an argument", `{"path":"a","hidden":"x"}`, `t: unknown argument "hidden"`},
		{"string wanted", `{"path":5}`, "t: args.path must be a string, not a number"},
		{"integer wanted", `{"path":"a","count":1.5}`, "t: args.count must be an integer, not a number"},
		{"integer not a string", `{"path":"a","count":"1"}`, "t: args.count must be an integer, not a string"},
		{"number wanted", `{"path":"a","ratio":"x"}`, "t: args.ratio must be a number, not a string"},
		{"boolean wanted", `{"path":"a","flag":1}`, "t: args.flag must be true or false, not a number"},
		{"array wanted", `{"path":"a","list":{}}`, "t: args.list must be an array, not an object"},
		{"array", `["path"]`, "t: args must be a JSON object, not an array"},
		{"string", `"path"`, "t: args must be a JSON object, not a string"},
		{"number", `3`, "t: args must be a JSON object, not a number"},
		{"invalid", `{"path":`, "t: args are not valid JSON"},
		{"garbage", `hello`, "t: args are not valid JSON"},
		{"trailing data", `{"path":"a"} {}`, "t: args are not valid JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var a sampleArgs
			err := DecodeArgs("t", json.RawMessage(tt.args), &a)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && err == nil:
				t.Fatalf("got no error, want %q", tt.want)
			case tt.want != "" && len(err.Error()) < len(tt.want), tt.want != "" && err.Error()[:len(tt.want)] != tt.want:
				t.Fatalf("got %q, want %q", err, tt.want)
			}
		})
	}
	var a sampleArgs
	if err := DecodeArgs("t", json.RawMessage(`{"path":"p","count":2,"ratio":0.5,"flag":true,"list":["x"]}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.Path != "p" || a.Count != 2 || a.Ratio == nil || *a.Ratio != 0.5 || !a.Flag || len(a.List) != 1 {
		t.Fatalf("decoded %+v", a)
	}
	if err := DecodeArgs("t", json.RawMessage(`{}`), a); err == nil {
		t.Fatal("a struct value, not a pointer, was accepted")
	}
}

func TestDecodeArgsNoArguments(t *testing.T) {
	t.Parallel()
	var none struct{}
	if err := DecodeArgs("t", nil, &none); err != nil {
		t.Fatal(err)
	}
	err := DecodeArgs("t", json.RawMessage(`{"x":1}`), &none)
	if err == nil || err.Error() != `t: unknown argument "x" (it takes none)` {
		t.Fatalf("got %v", err)
	}
}

func TestCutRune(t *testing.T) {
	t.Parallel()
	e := "é"    // 2 bytes
	euro := "€" // 3 bytes
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"a" + e, "a" + e},
		{"a" + e[:1], "a"},
		{"a" + euro[:2], "a"},
		{"a" + euro[:1], "a"},
		{"a" + euro, "a" + euro},
		{"\xff", "\xff"}, // not a cut rune: left for the caller to judge
	} {
		if got := string(cutRune([]byte(tt.in))); got != tt.want {
			t.Errorf("cutRune(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

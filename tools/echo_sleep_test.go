package tools

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	t.Parallel()
	echo := builtin(t, BuiltinConfig{}, "echo")
	for _, tt := range []struct{ args, want string }{
		{`{"text":"hi"}`, `{"text":"hi"}`},
		{` { "a" : [1, 2], "b": {"c": null} } `, `{"a":[1,2],"b":{"c":null}}`},
		{``, `{}`},
		{`null`, `{}`},
	} {
		res := mustOK(t, echo, "", tt.args, nil)
		if string(res.Output) != tt.want {
			t.Errorf("echo %s = %s, want %s", tt.args, res.Output, tt.want)
		}
	}
	mustFail(t, echo, "", `[1]`, "echo: args must be a JSON object, not an array")
	mustFail(t, echo, "", `"hi"`, "echo: args must be a JSON object, not a string")
	mustFail(t, echo, "", `{"text":`, "echo: args are not valid JSON")
}

func TestSleepArgs(t *testing.T) {
	t.Parallel()
	sleep := builtin(t, BuiltinConfig{MaxSleep: 2 * time.Second}, "sleep")
	for _, tt := range []struct{ args, want string }{
		{`{}`, "sleep: args.seconds is required"},
		{`{"seconds":"1"}`, "sleep: args.seconds must be a number, not a string"},
		{`{"seconds":-0.5}`, "sleep: args.seconds must be >= 0, not -0.5"},
		{`{"seconds":2.5}`, "sleep: args.seconds 2.5 is over the maximum of 2"},
		{`{"seconds":1,"minutes":1}`, `sleep: unknown argument "minutes" (want seconds)`},
		{`[1]`, "sleep: args must be a JSON object"},
	} {
		mustFail(t, sleep, "", tt.args, tt.want)
	}
	var out struct {
		Slept float64 `json:"slept_seconds"`
	}
	mustOK(t, sleep, "", `{"seconds":0}`, &out)
	start := time.Now()
	mustOK(t, sleep, "", `{"seconds":0.05}`, &out)
	if out.Slept != 0.05 || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("slept %v in %v", out.Slept, time.Since(start))
	}
}

func TestSleepHonoursContext(t *testing.T) {
	t.Parallel()
	sleep := builtin(t, BuiltinConfig{}, "sleep")

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := run(t, ctx, sleep, "", `{"seconds":30}`)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancelled sleep returned after %v", d)
	}

	ctx, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	if _, err := run(t, ctx, sleep, "", `{"seconds":30}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: got %v, want context.DeadlineExceeded", err)
	}

	done, cancel3 := context.WithCancel(t.Context())
	cancel3()
	if _, err := run(t, done, sleep, "", `{"seconds":0}`); !errors.Is(err, context.Canceled) {
		t.Fatalf("already cancelled: got %v", err)
	}
}

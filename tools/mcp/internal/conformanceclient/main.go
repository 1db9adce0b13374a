// Command conformanceclient is noeta's MCP client (package tools/mcp) as
// the @modelcontextprotocol/conformance suite's client scenarios run it:
// `conformanceclient URL`, the scenario named by MCP_CONFORMANCE_SCENARIO.
// It uses the client the way a host does: a Source of one url server, its
// tools listed as registry tools, and calls run through them. Which tools
// it calls is the scenario's (the suite's servers check that they were
// called); the arguments are the ones the suite's servers ask for. It
// exits 1, saying why, when the source cannot start or a call fails.
//
// Built and run by the tests of package mcp (TestConformanceClient); it is
// not part of the engine.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/noeta-go/noeta/tools"
	"github.com/noeta-go/noeta/tools/mcp"
)

// calls are the tools a scenario calls, with their arguments.
var calls = map[string]map[string]string{
	"tools_call":                          {"add_numbers": `{"a":5,"b":3}`},
	"sse-retry":                           {"test_reconnection": `{}`},
	"elicitation-sep1034-client-defaults": {"test_client_elicitation_defaults": `{}`},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: conformanceclient URL (the scenario in MCP_CONFORMANCE_SCENARIO)")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Getenv("MCP_CONFORMANCE_SCENARIO")); err != nil {
		fmt.Fprintln(os.Stderr, "conformanceclient:", err)
		os.Exit(1)
	}
}

func run(url, scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	src := mcp.New(mcp.Server{Name: "conformance", URL: url}, mcp.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = src.Close(stop)
	}()
	ts, err := src.Tools(ctx)
	if err != nil {
		return err
	}
	byName := map[string]tools.Tool{}
	var names []string
	for _, t := range ts {
		byName[t.Name()] = t
		names = append(names, t.Name())
	}
	fmt.Fprintf(os.Stderr, "scenario %s: tools %s\n", scenario, strings.Join(names, ", "))
	for remote, args := range calls[scenario] {
		t, ok := byName[mcp.ToolName("conformance", remote)]
		if !ok {
			return fmt.Errorf("the server offers no tool %q", remote)
		}
		res, err := t.Run(ctx, tools.Call{Args: json.RawMessage(args)})
		if err != nil {
			return fmt.Errorf("%s: %w", remote, err)
		}
		fmt.Fprintf(os.Stderr, "%s: ok=%v output=%s error=%s\n", remote, res.OK, res.Output, res.Error)
		if !res.OK {
			return fmt.Errorf("%s failed: %s", remote, res.Error)
		}
	}
	return nil
}

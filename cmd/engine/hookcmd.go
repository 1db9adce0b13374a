package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/internal/boundedio"
)

// maxTokenFile bounds --token-file.
const maxTokenFile = 4 << 10

func newHookCmd(g *globals) *cobra.Command {
	var url, tokenFile string
	var wait time.Duration
	cmd := &cobra.Command{Use: "hook", Short: "Speak an agent's hook protocol to a gateway: its calls judged and recorded", Args: cobra.NoArgs}
	cc := &cobra.Command{
		Use:   "claude-code",
		Short: "Forward a Claude Code hook event (stdin) to engine gateway --listen; its answer on stdout",
		Long: `claude-code is a Claude Code command hook: it posts the event on stdin to the
gateway's /hooks/claude-code and prints its answer. A PreToolUse is judged as the
next decision of the Claude Code session's task (allow, deny with the guard's
reason, or a wait for an approval); its PostToolUse is recorded as the call's
result. If anything fails, a PreToolUse is blocked (exit 2). The token is read
from --token-file, else from $NOETA_TOKEN (docs/gateway.md).`,
		Example: `  engine hook claude-code --url http://127.0.0.1:8931 --token-file ~/.noeta/token`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				url = os.Getenv("NOETA_GATEWAY_URL")
			}
			if wait <= 0 || wait > gateway.MaxHookWait {
				return usageErr("--wait is %v, want above 0 and at most %v", wait, gateway.MaxHookWait)
			}
			token := os.Getenv("NOETA_TOKEN")
			if tokenFile != "" {
				b, err := boundedio.ReadFile(cmd.Context(), tokenFile, maxTokenFile)
				if err != nil {
					// Blocked, as any failure: the call is not judged.
					fmt.Fprintf(g.stderr, "noeta: --token-file: %v\n", err)
					return exitCode(2)
				}
				token = strings.TrimSpace(string(b))
			}
			c := gateway.HookClient{URL: url, Token: token, Wait: wait}
			if code := c.Forward(cmd.Context(), cmd.InOrStdin(), g.rawOut, g.stderr); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	cc.Flags().StringVar(&url, "url", "", "the gateway's URL (engine gateway --listen; default $NOETA_GATEWAY_URL)")
	cc.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token (default $NOETA_TOKEN)")
	cc.Flags().DurationVar(&wait, "wait", gateway.DefaultHookWait, "how long a call may wait for its decision (an approval); Claude Code's timeout for the hook must be longer")
	cmd.AddCommand(cc)
	return cmd
}

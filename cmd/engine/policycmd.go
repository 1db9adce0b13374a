package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policyview"
	"github.com/noeta-go/noeta/replay"
)

// newPolicyCmd is the policy verbs (docs/policy.md); policyview holds their flow.
func newPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Try a governance config: replay it over the log, test it, report its shadow rules", Args: unknownVerb,
		RunE: func(*cobra.Command, []string) error {
			return usageErr("name a verb: policy replay, test or shadow-report")
		}}
	var config, since, agent, task, asJSON = "", "", "", "", false
	view := func(fn func(ctx context.Context, h *host.Host, f replay.Filter) (bool, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			f, err := replay.ParseFilter(since, agent, task, time.Now())
			if err != nil {
				return usageErr("%v", err)
			}
			if dir, err := g.dataDir(); err == nil && g.conn.embedded() && policyview.NoData(dir) != nil {
				return failErr(policyview.NoData(dir)) // a view never makes a data directory
			}
			h, err := openReadView(cmd.Context(), g, "policy")
			if err != nil {
				return err
			}
			defer h.Close()
			return verdict(fn(cmd.Context(), h.Host, f))
		}
	}
	replayCmd := &cobra.Command{Use: "replay --config NEW.yaml", Args: cobra.NoArgs,
		Short: "Re-judge every recorded action under another config and report what would change",
		Long: `replay asks NEW.yaml's guard stacks about every tool call, spawn and finish
the log recorded, with the guard context each had, and reports the verdicts
that would change. It only reads; what it cannot judge from the log (a tool
whose risk only its MCP server knows) is counted, never guessed. Exit 0 nothing
would change, 1 something would, 2 bad usage or config.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := governance(cmd.Context(), config)
			if err != nil {
				return err
			}
			return view(func(ctx context.Context, h *host.Host, f replay.Filter) (bool, error) {
				return policyview.Replay(ctx, h, cfg, f, g.stdout, asJSON)
			})(cmd, args)
		},
	}
	replayCmd.Flags().StringVar(&config, "config", "", "the config to replay under (default "+defaultConfig+" in the working directory)")
	shadowCmd := &cobra.Command{Use: "shadow-report", Args: cobra.NoArgs, Short: "Summarise what the shadow rules (shadow: true) would have decided, per rule",
		RunE: view(func(ctx context.Context, h *host.Host, f replay.Filter) (bool, error) {
			return false, policyview.Shadow(ctx, h, f, g.stdout, asJSON)
		}),
	}
	for _, c := range []*cobra.Command{replayCmd, shadowCmd} {
		c.Flags().StringVar(&since, "since", "", "only what was recorded since: a duration back (24h, 7d) or an RFC 3339 time")
		c.Flags().StringVar(&agent, "agent", "", "only the actions of this agent")
		c.Flags().StringVar(&task, "task", "", "only this task")
		c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object, the report")
	}
	testCmd := &cobra.Command{Use: "test NOETA.yaml CASES.yaml", Args: cobra.ExactArgs(2), Short: "Judge a table of proposed actions under a config and check each verdict",
		Long: `test judges each case of CASES.yaml (docs/policy.md) with the guard stacks of
NOETA.yaml, a whole governance config as --config takes it, and prints every
failing case, expected against got. Exit 0 all pass, 1 some fail, 2 bad files.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, cases, err := policyview.LoadTest(cmd.Context(), args[0], args[1])
			if err != nil {
				return usageErr("%v", err)
			}
			return verdict(policyview.Test(cmd.Context(), cfg, args[1], cases, g.stdout, asJSON))
		},
	}
	testCmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object with every case")
	cmd.AddCommand(replayCmd, testCmd, shadowCmd)
	return cmd
}

// verdict is a policy verb's exit: 1 when it found a change or a failing case.
func verdict(found bool, err error) error {
	if err != nil || !found {
		return failIf(err)
	}
	return exitCode(exitFailed)
}

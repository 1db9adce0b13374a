package config

import (
	"encoding/json"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/guards"
)

// designConfig is the example of DESIGN.md §7 with the rules and guards of §5.
const designConfig = `
agents:
  researcher:
    tools: [read_file, echo, shell]
    permission_mode: default            # default | acceptEdits | bypassPermissions
    budget: {max_iterations: 20, max_tool_calls: 50, max_cost_usd: 2.0, max_spawned_subtasks: 5, max_subtask_depth: 3}
    permissions:
      allowed_tools: [read_file, echo, shell]
      denied_tools: []
      max_risk_level: high              # low | medium | high
      allowed_subtask_agents: [helper]
      require_approval_tools: []
    repetition: {threshold: 3, action: require_approval}
  helper:
    tools: [echo]
rules:
  - match_tool: "shell"                 # glob; * matches any run of characters
    match_arg: {path: command, regex: "rm\\s+-rf"}   # or equals: / contains:
    action: deny                        # allow | deny | require_approval
    reason: "destructive shell command"
  - match_tool: "write_file"
    when: 'args.path.startsWith("/etc/")'   # CEL expression over tool, args, task; compiled at load
    action: require_approval
guards:
  - {name: change-freeze, priority: 150, rules: [{match_tool: "write_file", action: deny, reason: "freeze"}]}
hooks:
  post_tool_use: [{match_tool: "*", command: ["./notify.sh"]}]
  notification: [{on: approval, command: ["./page-oncall.sh"]}]
`

var designRisks = guards.RiskMap(map[string]string{"read_file": "low", "echo": "low", "shell": "high", "write_file": "medium"})

func toolCall(tool, args string) noeta.ProposedAction {
	return noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "call-1", Tool: tool, Args: json.RawMessage(args)}}
}

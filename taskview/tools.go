package taskview

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// ToolEntry is one tool an agent may call, as engine tools --json prints
// it: one object a line.
type ToolEntry struct {
	Agent       string          `json:"agent"`
	Tool        string          `json:"tool"`
	Risk        string          `json:"risk"`
	Source      string          `json:"source"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// WriteTools writes the tools each agent may call: a table, or with asJSON
// one ToolEntry a line.
func WriteTools(w io.Writer, entries []hostconfig.AgentTool, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, e := range entries {
			if err := enc.Encode(ToolEntry(e)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tTOOL\tRISK\tSOURCE\tDESCRIPTION")
	for _, e := range entries {
		// A tool's name and description come from its MCP server; a tab in
		// one is escaped too, so it cannot shift the columns.
		l := termsafe.Line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l(e.Agent), l(e.Tool), l(e.Risk), l(e.Source), timeline.Cut(e.Description, 60))
	}
	return tw.Flush()
}

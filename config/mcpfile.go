package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/noeta-go/noeta/internal/boundedio"
	"go.yaml.in/yaml/v3"
)

// maxMCPServersFile bounds an MCP client's file, read like noeta.yaml.
const maxMCPServersFile = MaxSize

// mcpFile is what mcp_servers_file brought in: the file read, its servers
// and where each is, for the error of a name declared twice.
type mcpFile struct {
	path    string
	servers map[string]MCPServer
	lines   map[string]int
	key     string // mcpServers, or VS Code's servers
	// disabled holds the servers the file marks disabled.
	disabled map[string]bool
}

// mcpServersFile reads the MCP client's file named at path (the value of
// mcp_servers_file), relative to noeta.yaml's directory. Its mistakes go to
// d.fileErrs, each naming the file, the JSON path and the line; a file
// that cannot be read is a mistake of noeta.yaml's key.
func (d *decoder) mcpServersFile(n *yaml.Node, path string) *mcpFile {
	rel, ok := d.str(n, path)
	if !ok {
		if isNull(d.enter(n, path)) {
			d.errs.add(path, "must be the path of an MCP client's JSON file (.mcp.json, .vscode/mcp.json), not null")
		}
		return nil
	}
	if rel == "" {
		d.errs.add(path, "must be the path of an MCP client's JSON file (.mcp.json, .vscode/mcp.json), not empty")
		return nil
	}
	p := rel
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.dir, p)
	}
	data, err := boundedio.ReadFile(d.ctx, p, maxMCPServersFile)
	if err != nil {
		d.errs.addf(path, "cannot read the MCP servers file: %v", err)
		return nil
	}
	fd := &decoder{errs: &errorList{file: p, pos: positions{}}, ctx: d.ctx}
	d.fileErrs = fd.errs
	out := &mcpFile{path: p, lines: map[string]int{}}
	root, ok := fd.parseJSON(data)
	if !ok {
		return out
	}
	f, _ := fd.fields(root, "", "mcpServers", "servers", "inputs")
	switch ms, vs := f["mcpServers"], f["servers"]; {
	case ms != nil && vs != nil:
		fd.errs.add("servers", "the file has both mcpServers and servers (VS Code's); keep one")
		return out
	case ms != nil:
		out.key, n = "mcpServers", ms
	case vs != nil:
		out.key, n = "servers", vs
	default:
		fd.errs.add("", "has no mcpServers (nor VS Code's servers): it is not an MCP client's file")
		return out
	}
	if in, ok := f["inputs"]; ok && len(fd.seq(in, "inputs")) > 0 {
		fd.errs.add("inputs", "noeta asks no one for inputs: give the values as ${VAR} in env or headers, from the engine's environment")
	}
	out.servers = map[string]MCPServer{}
	if n = fd.enter(n, out.key); n == nil {
		return out
	}
	fd.depth++
	ps, _ := fd.pairs(n, out.key)
	for _, p := range ps {
		sp := join(out.key, p.key)
		fd.mark(sp, p.keyN)
		out.lines[p.key] = p.keyN.Line
		if s, ok := fd.mcpServer(p.value, sp, p.key, true); ok {
			out.servers[p.key] = s
		}
	}
	fd.depth--
	out.disabled = fd.disabled
	d.exhausted = d.exhausted || fd.exhausted
	return out
}

// parseJSON parses data, which must be JSON, into a node tree with lines.
// The YAML parser reads it (JSON is YAML's flow style), so that the
// decoder's strict checks and positions serve both files; encoding/json
// first refuses what is not JSON (comments, trailing commas, YAML).
func (d *decoder) parseJSON(data []byte) (*yaml.Node, bool) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			d.errs.addf("", "not JSON (comments and trailing commas are not JSON): %v (line %d)", se, line)
		} else {
			d.errs.addf("", "not JSON: %v", err)
		}
		return nil, false
	}
	if _, ok := v.(map[string]any); !ok {
		d.errs.add("", "must be a JSON object with mcpServers")
		return nil, false
	}
	data = yamlStrings(data)
	if err := boundedio.CheckYAML(data, maxConfigNodes); err != nil {
		d.errs.add("", err.Error())
		return nil, false
	}
	var root yaml.Node
	if err := safeUnmarshal(data, &root); err != nil {
		d.errs.add("", fmt.Sprintf("cannot read the JSON: %v", err))
		return nil, false
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || !sameJSON(root.Content[0], v) {
		// The YAML parser read something else than encoding/json did:
		// refused, never decoded as the one or the other.
		d.errs.add("", "cannot read the JSON: the YAML parser that finds its lines reads it differently")
		return nil, false
	}
	return root.Content[0], true
}

// sameJSON reports whether the node tree the YAML parser built holds what
// encoding/json decoded: the same keys, lengths, kinds and strings. A key
// given twice is left to the decoder, which refuses it.
func sameJSON(n *yaml.Node, v any) bool {
	switch n.Kind {
	case yaml.MappingNode:
		m, ok := v.(map[string]any)
		if !ok || len(n.Content)%2 != 0 {
			return false
		}
		count := map[string]int{}
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return false
			}
			count[n.Content[i].Value]++
		}
		if len(count) != len(m) {
			return false
		}
		for i := 0; i < len(n.Content); i += 2 {
			k := n.Content[i].Value
			mv, ok := m[k]
			if !ok || (count[k] == 1 && !sameJSON(n.Content[i+1], mv)) {
				return false
			}
		}
		return true
	case yaml.SequenceNode:
		s, ok := v.([]any)
		if !ok || len(s) != len(n.Content) {
			return false
		}
		for i, it := range n.Content {
			if !sameJSON(it, s[i]) {
				return false
			}
		}
		return true
	case yaml.ScalarNode:
		switch v := v.(type) {
		case string:
			return n.ShortTag() == "!!str" && n.Value == v
		case bool:
			return n.ShortTag() == "!!bool"
		case float64:
			return n.ShortTag() == "!!int" || n.ShortTag() == "!!float"
		case nil:
			return n.ShortTag() == "!!null"
		}
	}
	return false
}

// mergeMCPServers adds the file's servers to those of mcp_servers:. A name
// in both is an error naming both places: which one was meant is not
// noeta's to pick.
func (d *decoder) mergeMCPServers(yamlServers map[string]MCPServer, file *mcpFile) map[string]MCPServer {
	if file == nil || len(file.lines) == 0 {
		return yamlServers
	}
	out := make(map[string]MCPServer, len(yamlServers)+len(file.servers))
	for n, s := range yamlServers {
		out[n] = s
	}
	for _, n := range sortedKeys(file.lines) {
		if _, dup := yamlServers[n]; dup {
			d.errs.addf(join("mcp_servers", n), "is declared here and in %s (%s, line %d): keep one", file.path, join(file.key, n), file.lines[n])
			continue
		}
		if s, ok := file.servers[n]; ok {
			out[n] = s
		}
	}
	return out
}

// yamlStrings rewrites, in valid JSON, each string with an escape or a
// character beyond ASCII in a form the YAML parser reads as the same
// string: YAML's double-quoted escapes lack some of JSON's (a UTF-16
// surrogate pair is not read as one character), and YAML folds a raw
// U+0085, U+2028 or U+2029 as a line break where JSON keeps it. A JSON
// string holds no newline, so the lines stay.
func yamlStrings(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			out = append(out, data[i])
			continue
		}
		end, escaped := i+1, false
		for ; end < len(data) && data[end] != '"'; end++ {
			switch {
			case data[end] == '\\':
				escaped = true
				end++
			case data[end] >= 0x80:
				escaped = true
			}
		}
		lit := data[i : end+1]
		var s string
		if !escaped || json.Unmarshal(lit, &s) != nil {
			out = append(out, lit...)
		} else {
			// strconv.Quote's escapes (\n, \t, \uXXXX, \UXXXXXXXX...)
			// are all YAML's too.
			out = strconv.AppendQuote(out, s)
		}
		i = end
	}
	return out
}

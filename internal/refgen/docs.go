package refgen

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// sources holds the doc comments of the packages a reference is written
// from, parsed from their Go files.
type sources struct {
	// fields holds each struct field's doc comment, by "pkg.Type" and the
	// field's name.
	fields map[string]map[string]string
	// blocks are the code blocks of the packages' and types' doc comments,
	// in the order of the packages given, the package's own first.
	blocks []string
	// funcs holds each function's doc comment, by "pkg.Func".
	funcs map[string]string
}

// loadSources parses the non-test Go files of each directory (relative to
// root), naming each package by its directory's last element.
func loadSources(root string, dirs ...string) (*sources, error) {
	s := &sources{fields: map[string]map[string]string{}, funcs: map[string]string{}}
	for _, dir := range dirs {
		fset := token.NewFileSet()
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return nil, err
		}
		var files []*ast.File
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, n), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		name := filepath.Base(dir)
		p, err := doc.NewFromFiles(fset, files, "github.com/noeta-go/noeta/"+dir, doc.AllDecls|doc.PreserveAST)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		s.blocks = append(s.blocks, codeBlocks(p.Doc)...)
		for _, t := range p.Types {
			s.blocks = append(s.blocks, codeBlocks(t.Doc)...)
			for _, spec := range t.Decl.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				m := map[string]string{}
				for _, f := range st.Fields.List {
					text := f.Doc.Text()
					if text == "" {
						text = f.Comment.Text()
					}
					for _, n := range f.Names {
						m[n.Name] = text
					}
				}
				s.fields[name+"."+ts.Name.Name] = m
			}
			for _, c := range t.Consts {
				constDocs(s.fields, name, c)
			}
			for _, f := range t.Funcs {
				s.funcs[name+"."+f.Name] = f.Doc
			}
		}
		for _, c := range p.Consts {
			constDocs(s.fields, name, c)
		}
		for _, f := range p.Funcs {
			s.funcs[name+"."+f.Name] = f.Doc
		}
	}
	return s, nil
}

// constDocs records the doc comment of each constant of v, under
// "pkg.const", the group's doc for a constant without one of its own.
func constDocs(fields map[string]map[string]string, pkg string, v *doc.Value) {
	m := fields[pkg+".const"]
	if m == nil {
		m = map[string]string{}
		fields[pkg+".const"] = m
	}
	for _, spec := range v.Decl.Specs {
		vs, ok := spec.(*ast.ValueSpec)
		if !ok {
			continue
		}
		text := vs.Doc.Text()
		if text == "" {
			text = v.Doc
		}
		for _, n := range vs.Names {
			m[n.Name] = text
		}
	}
}

// codeBlocks returns the code blocks of a doc comment.
func codeBlocks(text string) []string {
	var p comment.Parser
	var out []string
	for _, b := range p.Parse(text).Content {
		if c, ok := b.(*comment.Code); ok {
			out = append(out, c.Text)
		}
	}
	return out
}

// field is the doc comment of field of one of types ("pkg.Type"), the first
// that has the field, matched by name: the key with its underscores taken
// out, ignoring case, or as aliases says.
func (s *sources) field(types []string, key string, aliases map[string]string) (typ, name, text string) {
	want := strings.ReplaceAll(key, "_", "")
	if a, ok := aliases[key]; ok {
		want = a
	}
	for _, t := range types {
		for n, d := range s.fields[t] {
			if strings.EqualFold(n, want) {
				return t, n, d
			}
		}
	}
	return "", "", ""
}

// An example is what a doc comment's YAML block shows for a key: its value,
// as written, and the comment on its line.
type example struct {
	value   string
	comment string
	// from is the key the example was shown for, when it is another's.
	from string
}

// examples reads every code block that parses as YAML and, walking it
// along the keys the decoder knows, keeps the first example of each key.
// A block that is not YAML, or a key the decoder does not know, is passed
// over: a doc comment also shows other things.
func (s *sources) examples(keys []Key) map[string]example {
	known := map[string]bool{}
	for _, k := range keys {
		known[k.Path] = true
	}
	prefix := func(p string) bool {
		for k := range known {
			if strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"[]") {
				return true
			}
		}
		return false
	}
	out := map[string]example{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				if known[p] {
					ex, ok := out[p]
					if !ok {
						ex.value = flow(v)
					}
					if ex.comment == "" {
						// A later block may say what an earlier one only
						// shows.
						ex.comment = lineComment(k, v)
					}
					out[p] = ex
					walk(v, p)
					continue
				}
				if np := join(path, "<name>"); prefix(np) {
					walk(v, np)
				}
			}
		}
	}
	for _, b := range s.blocks {
		var root yaml.Node
		if yaml.Unmarshal([]byte(b), &root) != nil {
			continue
		}
		walk(&root, "")
	}
	// A key with no example of its own takes one of the same key in a
	// mapping of the same kind (an agent's sandbox.limits.cpu_seconds, the
	// top-level one's), found by its last two steps.
	// Only the examples shown are lent: ranging over out while it gains
	// the borrowed ones would lend a borrowed one or not, as the map's
	// order fell, and the page would differ from one run to the next.
	shown := maps.Clone(out)
	for _, k := range keys {
		if _, ok := out[k.Path]; ok {
			continue
		}
		parent, name := splitPath(k.Path)
		_, pname := splitPath(parent)
		tail := strings.TrimSuffix(pname, "[]") + "."
		for p, ex := range shown {
			pp, pn := splitPath(p)
			if _, ppn := splitPath(pp); pn == name && strings.TrimSuffix(ppn, "[]")+"." == tail && ex.value != "" {
				if cur, ok := out[k.Path]; !ok || p < cur.from {
					ex.from = p
					out[k.Path] = ex
				}
			}
		}
	}
	return out
}

func lineComment(k, v *yaml.Node) string {
	c := v.LineComment
	if c == "" {
		c = k.LineComment
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(c), "#"))
}

// flow writes n on one line, in flow style, without its comments.
func flow(n *yaml.Node) string {
	c := stripNode(*n)
	out, err := yaml.Marshal(&c)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func stripNode(n yaml.Node) yaml.Node {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style |= yaml.FlowStyle
	}
	if n.Kind == yaml.ScalarNode && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		n.Style = yaml.DoubleQuotedStyle
	}
	kids := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		cc := stripNode(*c)
		kids[i] = &cc
	}
	n.Content = kids
	return n
}

// docLink is a doc comment's link: [Name], [*Name], [pkg.Name], [Type.Method].
var docLink = regexp.MustCompile(`\[\*?((?:[a-z]\w*\.)?[A-Z]\w*(?:\.[A-Z]\w*)?)\]`)

// prose joins a doc comment's first paragraph into one line, its [links]
// written as code.
func prose(text string) string {
	text = strings.TrimSpace(text)
	if i := strings.Index(text, "\n\n"); i >= 0 {
		text = text[:i]
	}
	text = strings.Join(strings.Fields(text), " ")
	return docLink.ReplaceAllString(text, "`$1`")
}

// typeBlock is the first YAML block of the task file's own doc comment.
func (s *sources) typeBlock() string {
	for _, b := range s.blocks {
		if strings.HasPrefix(b, "agent:") {
			return b
		}
	}
	return ""
}

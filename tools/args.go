package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// DecodeArgs decodes a tool's args object into dst, a pointer to a struct,
// strictly, with errors worded for the model ("read_file: args.path is
// required"). The struct's fields are named by their json tags; a field tagged
// `args:"required"` must be present and not null. Empty or null args mean {}.
// Refused: args that are not a JSON object, a member the struct does not name,
// a member of the wrong JSON type, and a missing required member.
func DecodeArgs(tool string, args json.RawMessage, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("%s: DecodeArgs needs a pointer to a struct, not %T", tool, dst)
	}
	sv := rv.Elem()
	st := sv.Type()

	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return fmt.Errorf("%s: args are not valid JSON", tool)
		}
		return fmt.Errorf("%s: args must be a JSON object, not %s", tool, jsonKind(trimmed[0]))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &members); err != nil {
		return fmt.Errorf("%s: args are not valid JSON: %v", tool, err)
	}

	known := make(map[string]int, st.NumField())
	var names []string
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		known[name] = i
		names = append(names, name)
	}
	var unknown []string
	for k := range members {
		if _, ok := known[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		sort.Strings(names)
		want := "it takes none"
		if len(names) > 0 {
			want = "want " + strings.Join(names, ", ")
		}
		return fmt.Errorf("%s: unknown argument %q (%s)", tool, unknown[0], want)
	}
	for _, name := range names {
		i := known[name]
		f := st.Field(i)
		raw, present := members[name]
		if !present || string(raw) == "null" {
			if f.Tag.Get("args") == "required" {
				return fmt.Errorf("%s: args.%s is required", tool, name)
			}
			continue
		}
		if err := json.Unmarshal(raw, sv.Field(i).Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return fmt.Errorf("%s: args.%s must be %s, not %s", tool, name, typeWord(f.Type), jsonKind(raw[0]))
			}
			return fmt.Errorf("%s: args.%s: %v", tool, name, err)
		}
	}
	return nil
}

// typeWord names the JSON type a Go field decodes from.
func typeWord(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// jsonKind names the JSON type of a value from its first byte.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

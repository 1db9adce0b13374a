package guards

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// jsonObject is a CEL map over a canonical JSON object that decodes only what
// an expression reads. Rules mostly read one or two keys (args.path,
// has(args.mode)), and decoding whole argument documents into Go maps was most
// of the cost of a CEL rule. Key lookups scan the bytes; anything else —
// iteration, equality, conversion — decodes the whole object once and
// delegates to cel-go's own map.
type jsonObject struct {
	raw  []byte // a canonical JSON object
	full ref.Val
	// The last key looked up and its value: has(args.x) && args.x ... reads
	// the same key twice.
	lastKey string
	lastVal ref.Val
}

var (
	_ traits.Mapper = (*jsonObject)(nil)
	// cel-go's field selection takes this fast path before Find.
	_ interface{ FindStringKey(string) (any, bool) } = (*jsonObject)(nil)
)

func (o *jsonObject) decoded() ref.Val {
	if o.full == nil {
		var m map[string]any
		if err := json.Unmarshal(o.raw, &m); err != nil {
			o.full = types.NewErr("args: %v", err)
		} else {
			o.full = types.DefaultTypeAdapter.NativeToValue(m)
		}
	}
	return o.full
}

// FindStringKey looks a key up without decoding the object.
func (o *jsonObject) FindStringKey(key string) (any, bool) {
	v, ok := o.findString(key)
	if !ok {
		return nil, false
	}
	return v, true
}

func (o *jsonObject) findString(key string) (ref.Val, bool) {
	if o.lastVal != nil && o.lastKey == key {
		return o.lastVal, true
	}
	raw, ok := findKey(o.raw, key)
	if !ok {
		return nil, false
	}
	v := jsonToVal(raw)
	o.lastKey, o.lastVal = key, v
	return v, true
}

func (o *jsonObject) Find(key ref.Val) (ref.Val, bool) {
	if s, ok := key.(types.String); ok {
		return o.findString(string(s))
	}
	m, ok := o.decoded().(traits.Mapper)
	if !ok {
		return o.decoded(), false
	}
	return m.Find(key)
}

func (o *jsonObject) Get(key ref.Val) ref.Val {
	if v, ok := o.Find(key); ok {
		return v
	} else if types.IsError(v) {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

func (o *jsonObject) Contains(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok && v != nil && types.IsError(v) {
		return v
	}
	return types.Bool(ok)
}

func (o *jsonObject) Size() ref.Val {
	n := 0
	for i := 1; i < len(o.raw) && o.raw[i] == '"'; n++ {
		kEnd := skipString(o.raw, i)
		i = skipValue(o.raw, kEnd+1)
		if i < len(o.raw) && o.raw[i] == ',' {
			i++
		}
	}
	return types.Int(n)
}

func (o *jsonObject) Iterator() traits.Iterator {
	if m, ok := o.decoded().(traits.Mapper); ok {
		return m.Iterator()
	}
	return nil
}

func (o *jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.decoded().ConvertToNative(t)
}

func (o *jsonObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return o.decoded().ConvertToType(t)
}

func (o *jsonObject) Equal(other ref.Val) ref.Val { return o.decoded().Equal(other) }
func (o *jsonObject) Type() ref.Type              { return types.MapType }
func (o *jsonObject) Value() any                  { return o.decoded().Value() }

// findKey returns the value of key in a canonical JSON object.
func findKey(obj []byte, key string) ([]byte, bool) {
	for i := 1; i < len(obj) && obj[i] == '"'; {
		kEnd := skipString(obj, i)
		if kEnd >= len(obj) || obj[kEnd] != ':' {
			return nil, false
		}
		vEnd := skipValue(obj, kEnd+1)
		if keyEquals(obj[i:kEnd], key) {
			return obj[kEnd+1 : vEnd], true
		}
		i = vEnd
		if i < len(obj) && obj[i] == ',' {
			i++
		}
	}
	return nil, false
}

// keyEquals compares a quoted canonical key with a Go string.
func keyEquals(quoted []byte, key string) bool {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == key
}

// jsonToVal converts one canonical JSON value to a CEL value; numbers are
// doubles, as JSON has one number type.
func jsonToVal(raw []byte) ref.Val {
	if len(raw) == 0 {
		return types.NewErr("args: empty value")
	}
	switch raw[0] {
	case '"':
		if s := raw[1 : len(raw)-1]; bytes.IndexByte(s, '\\') < 0 {
			return types.String(s)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return types.NewErr("args: %v", err)
		}
		return types.String(s)
	case '{':
		return &jsonObject{raw: raw}
	case '[':
		var a []any
		if err := json.Unmarshal(raw, &a); err != nil {
			return types.NewErr("args: %v", err)
		}
		return types.DefaultTypeAdapter.NativeToValue(a)
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return types.NewErr("args: %v", err)
	}
	return types.Double(f)
}

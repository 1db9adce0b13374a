package settings

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// Logger is the structured logger on w of the --log-format (text or json)
// and --log-level (debug, info, warn or error) settings.
func Logger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level is %q, want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format is %q, want text or json", format)
}

// FileName is the settings file of a command: the value of its flag named
// flag when given on the command line, else the environment variable env,
// else none. The file cannot name itself, so it is read before [Table.Apply].
func FileName(flags *pflag.FlagSet, flag, env string, lookupEnv func(string) (string, bool)) string {
	if fl := flags.Lookup(flag); fl != nil && fl.Changed {
		return fl.Value.String()
	}
	if v, ok := lookupEnv(env); ok {
		return v
	}
	return ""
}

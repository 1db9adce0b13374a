package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/internal/natsconn"
	"github.com/noeta-go/noeta/internal/settings"
)

// Settings come from three places, the first that has one winning: a flag
// on the command line, an environment variable NOETA_<KEY>, and (serve only)
// the serve config file (--serve-config, YAML or JSON) under <key>. The
// connection settings are read from the environment by every verb; the
// others, and the file, only by serve.
var engineSettings = settings.Table{
	{Key: "nats", Conn: true, Show: natsconn.RedactURL},
	{Key: "creds", Conn: true},
	{Key: "user", Conn: true},
	{Key: "password", Conn: true, Secret: true},
	{Key: "tls_ca", Conn: true},
	{Key: "tls_cert", Conn: true},
	{Key: "tls_key", Conn: true},
	{Key: "prefix", Conn: true},
	{Key: "replicas", Kind: settings.Int, Conn: true},
	{Key: "lease_ttl", Kind: settings.Duration, Conn: true},
	{Key: "batch", Conn: true},
	{Key: "workers", Kind: settings.Int},
	{Key: "queue"},
	{Key: "grace", Kind: settings.Duration},
	{Key: "http"},
	{Key: "http_tls_cert"},
	{Key: "http_tls_key"},
	{Key: "behind_tls_proxy", Kind: settings.Bool},
	{Key: "max_streams", Kind: settings.Int},
	{Key: "max_streams_per_client", Kind: settings.Int},
	{Key: "config"},
	{Key: "workspace"},
	{Key: "data"},
	{Key: "child", Kind: settings.Bool},
	{Key: "hooks", Kind: settings.Bool},
	{Key: "audit", Kind: settings.Bool},
	{Key: "gateway"},
	{Key: "gateway_tool_names"},
	{Key: "log_format"},
	{Key: "log_level"},
}

// envServeConfig names the serve config file when --serve-config does not.
const envServeConfig = "NOETA_SERVE_CONFIG"

// envList is the environment variables a verb reads, for its help.
func envList(serve bool) string {
	if serve {
		return engineSettings.EnvList(true, envServeConfig)
	}
	return engineSettings.EnvList(false)
}

// applySettings fills every flag of cmd that was not given on the command
// line from the environment, then (serve) from the config file. Its errors
// are usage errors.
func applySettings(cmd *cobra.Command, serve bool, file string, lookupEnv func(string) (string, bool)) (settings.Sources, error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	src, err := engineSettings.Apply(ctx, cmd.Flags(), serve, file, lookupEnv)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return src, nil
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HookClient forwards one Claude Code hook event from a command hook
// (stdin) to a gateway's HookPath: engine hook claude-code.
type HookClient struct {
	// URL is the gateway's base URL (http://127.0.0.1:8931); HookPath is
	// appended unless it ends with it already.
	URL string
	// Token is the bearer token of the config's http: tokens ("" sends
	// none: a trusted proxy in front of the gateway may vouch instead).
	Token string
	// Wait is how long a PreToolUse may wait for its decision (an
	// approval): the hook's timeout in Claude Code's settings must be
	// longer.
	Wait time.Duration
	// HTTP is the client; nil is one whose timeout is Wait plus a minute.
	HTTP *http.Client
}

// Exit codes of a command hook as Claude Code reads them: 0 and the JSON on
// stdout, 2 blocks (a PreToolUse is denied, stderr shown to Claude), any
// other is an error shown to the user that blocks nothing.
const (
	hookExitOK    = 0
	hookExitError = 1
	hookExitBlock = 2
)

// Forward reads one event from in, posts it and writes the gateway's
// answer to out; it returns the exit code. Whatever fails, a PreToolUse
// is blocked (exit 2, the reason on errOut): a call the gateway did not
// judge does not run. Another event that fails exits 1, which blocks
// nothing (exit 2 would, for a Stop, keep Claude working).
func (c HookClient) Forward(ctx context.Context, in io.Reader, out, errOut io.Writer) int {
	body, err := io.ReadAll(io.LimitReader(in, MaxHookBytes+1))
	event := eventOf(body)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errOut, "noeta: "+format+"\n", args...)
		if event == hookPreToolUse || event == "" {
			if event == hookPreToolUse {
				fmt.Fprintln(errOut, "noeta: the call is denied: the gateway did not judge it")
			}
			return hookExitBlock
		}
		return hookExitError
	}
	switch {
	case err != nil:
		return fail("reading the hook event: %v", err)
	case len(body) > MaxHookBytes:
		return fail("the hook event is over %d bytes", MaxHookBytes)
	case c.URL == "":
		return fail("no gateway URL (--url, or NOETA_GATEWAY_URL)")
	}
	target, err := hookURL(c.URL, c.Wait)
	if err != nil {
		return fail("%v", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: c.Wait + time.Minute}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fail("%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail("the gateway at %s did not answer: %v", c.URL, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20+1))
	if err != nil {
		return fail("reading the gateway's answer: %v", err)
	}
	if len(answer) > 1<<20 {
		return fail("the gateway's answer is over 1 MiB")
	}
	if resp.StatusCode != http.StatusOK {
		return fail("the gateway answered %s: %s", resp.Status, strings.TrimSpace(truncateText(string(answer), 500)))
	}
	if !json.Valid(answer) {
		return fail("the gateway's answer is not JSON")
	}
	if _, err := out.Write(answer); err != nil {
		return fail("writing the answer: %v", err)
	}
	return hookExitOK
}

// eventOf is the event a body names, or "" when it names none.
func eventOf(body []byte) string {
	var e struct {
		Event string `json:"hook_event_name"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Event
}

// hookURL is the gateway's hook endpoint under base, with the wait.
func hookURL(base string, wait time.Duration) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("the gateway URL %q is not an http(s) URL", base)
	}
	if !strings.HasSuffix(u.Path, HookPath) {
		u.Path = strings.TrimSuffix(u.Path, "/") + HookPath
	}
	if wait > 0 {
		q := u.Query()
		q.Set("wait", wait.String())
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

package webui

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"time"

	"github.com/noeta-go/noeta/config"
)

// ServeOn serves srv on ln until srv is shut down: over HTTPS with cert
// (TLS 1.2 at least), else plain HTTP, which [CheckListen] allows only on
// loopback or behind a TLS-terminating proxy.
func ServeOn(srv *http.Server, ln net.Listener, cert *tls.Certificate) error {
	if cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// inboxShutdownWait bounds an inbox's shutdown once its live streams have
// ended.
const inboxShutdownWait = 5 * time.Second

// Inbox is a Server served on a listener of its own (engine ui), from
// [StartInbox] until [Inbox.Wait] returns.
type Inbox struct {
	s      *Server
	hs     *http.Server
	url    string
	served chan error
}

// StartInbox serves s on ln (over HTTPS with cert) with l's timeouts, in a
// goroutine that ends when Wait shuts the server down or it fails.
func StartInbox(s *Server, ln net.Listener, l Limits, cert *tls.Certificate) *Inbox {
	in := &Inbox{s: s, hs: NewHTTPServer(s, l), served: make(chan error, 1)}
	scheme := "http"
	if cert != nil {
		scheme = "https"
	}
	in.url = scheme + "://" + ln.Addr().String()
	go func() { in.served <- ServeOn(in.hs, ln, cert) }()
	return in
}

// URL is the inbox's address: its scheme, host and port.
func (in *Inbox) URL() string { return in.url }

// LoginURL is a link that logs a browser in as p, once: a fresh one-time
// token in the fragment, which the page exchanges for a session and which
// never reaches a server's log.
func (in *Inbox) LoginURL(p Principal) string {
	return in.url + "/login#token=" + in.s.LoginToken(p)
}

// WriteWelcome says on w where the inbox is and how to log in. With local
// (the local user of the embedded default) it is a one-time link that logs
// the browser in as local, which it returns for a browser to open; else a
// token of http.tokens, or, when http has neither tokens nor a trusted
// proxy, that nobody can log in.
func (in *Inbox) WriteWelcome(w io.Writer, local *Principal, http config.HTTP) (loginURL string) {
	switch {
	case local != nil:
		loginURL = in.LoginURL(*local)
		fmt.Fprintf(w, "inbox: %s\nlog in as %s (the link works once): %s\n", in.url, local.Name, loginURL)
	case http.Empty():
		fmt.Fprintf(w, "inbox: %s\nnobody can log in: the config has no http.tokens or http.trusted_proxy (engine token prints a token)\n", in.url)
	default:
		fmt.Fprintf(w, "inbox: %s (log in with a token of http.tokens)\n", in.url)
	}
	return loginURL
}

// Wait serves until ctx ends, then ends the live streams and shuts the
// server down. If the server fails first, Wait returns its error at once.
func (in *Inbox) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case err := <-in.served:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	in.s.Close()
	sctx, cancel := context.WithTimeout(context.Background(), inboxShutdownWait)
	defer cancel()
	_ = in.hs.Shutdown(sctx)
	return nil
}

// OpenBrowser asks the desktop to open url; failing is only logged, since
// the caller prints the URL anyway. The opener's process is waited for in
// a goroutine that ends when it exits.
func OpenBrowser(url string, logger interface{ Warn(string, ...any) }) {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		logger.Warn("could not open a browser; open the URL yourself", "err", err)
		return
	}
	go func() { _ = cmd.Wait() }()
}

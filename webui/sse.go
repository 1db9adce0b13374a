package webui

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// sse writes server-sent events; the first write error stops it.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (s *sse) header() {
	// A stream lives as long as its client reads: the server's request
	// timeouts are not its to end it by.
	clearDeadlines(s.w)
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.flush()
}

// event writes one event; id "" leaves the client's last id as it is.
func (s *sse) event(id, typ string, v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	var sb strings.Builder
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	sb.WriteString("event: " + typ + "\n")
	// JSON has no raw newlines: one data line.
	sb.WriteString("data: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	s.write(sb.String())
}

func (s *sse) comment(text string) { s.write(": " + text + "\n\n") }

func (s *sse) write(str string) {
	if s.err != nil {
		return
	}
	if _, err := s.w.Write([]byte(str)); err != nil {
		s.err = err
		return
	}
	s.flush()
}

func (s *sse) flush() {
	if s.err == nil {
		s.err = s.rc.Flush()
	}
}

// problem writes an RFC 9457 problem.
func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "urn:noeta:problem:" + typ, "title": title, "status": status, "detail": detail,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func quote(s string) string { return strconv.Quote(s) }

package webui

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

type sseEvent struct{ id, typ, data string }

// readEvents sends the events of an SSE response to a channel until it ends.
func readEvents(t *testing.T, res *http.Response) <-chan sseEvent {
	ch := make(chan sseEvent, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.typ != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan sseEvent, typ string) sseEvent {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before a %s event", typ)
			}
			if ev.typ == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event within a minute", typ)
		}
	}
}

// nextRecord returns the next record event of type typ.
func nextRecord(t *testing.T, ch <-chan sseEvent, typ string) sseEvent {
	t.Helper()
	for {
		ev := next(t, ch, "record")
		if strings.Contains(ev.data, `"type":"`+typ+`"`) {
			return ev
		}
	}
}

func stream(t *testing.T, ctx context.Context, url string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream %s: %d %s", url, res.StatusCode, res.Header.Get("Content-Type"))
	}
	return readEvents(t, res)
}

// TestApprovalsStreamAndTimeline: the approvals stream starts with the
// current set, then puts a request as it is made and deletes it once
// answered; a task's timeline streams its records live, each with its seq
// as the event id, and resumes after Last-Event-ID without repeating one.
func TestApprovalsStreamAndTimeline(t *testing.T) {
	h := openHost(t)
	s := newServer(t, h)
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ap := stream(t, ctx, ts.URL+"/api/v1/approvals/stream")
	if ev := next(t, ap, "snapshot"); ev.data != `{"approvals":[]}` {
		t.Fatalf("snapshot: %s", ev.data)
	}
	task, handle := submitWaiting(t, h)
	var put Approval
	if err := json.Unmarshal([]byte(next(t, ap, "put").data), &put); err != nil {
		t.Fatal(err)
	}
	if put.Task != task || put.Handle != handle || put.Tool != "echo" || put.Agent != "assistant" || put.Kind != eventlog.WaitingApproval {
		t.Fatalf("put: %+v", put)
	}
	tl := stream(t, ctx, ts.URL+"/api/v1/tasks/"+task+"/events")
	first := next(t, tl, "record")
	if first.id != "1" {
		t.Errorf("TaskCreated id %q", first.id)
	}
	nextRecord(t, tl, "ApprovalRequested")

	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/v1/tasks/"+task+"/approvals/"+handle, strings.NewReader(`{"decision":"approve","reason":"fine"}`))
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d", res.StatusCode)
	}
	del := next(t, ap, "delete")
	if !strings.Contains(del.data, task) || !strings.Contains(del.data, handle) {
		t.Errorf("delete: %s", del.data)
	}
	resolved := nextRecord(t, tl, "ApprovalResolved")
	if !strings.Contains(resolved.data, `"approver":"alice"`) {
		t.Errorf("resolved: %s", resolved.data)
	}
	done := nextRecord(t, tl, "TaskCompleted")

	// Resumed from the ApprovalResolved, the stream sends what came after
	// it and nothing before.
	req, _ = http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/v1/tasks/"+task+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", resolved.id)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	again := readEvents(t, res)
	ev := <-again
	if want := strconv.Itoa(mustAtoi(t, resolved.id) + 1); ev.id != want {
		t.Errorf("resumed at %q after %s, want %s", ev.id, resolved.id, want)
	}
	// Every seq once, in order, to the end.
	for prev := mustAtoi(t, ev.id); ev.id != done.id; {
		ev = <-again
		if n := mustAtoi(t, ev.id); n != prev+1 {
			t.Fatalf("seq %d after %d", n, prev)
		} else {
			prev = n
		}
	}
}

// TestStreamEndsAtLogout: a live stream opened with a session ends (with an
// error event) once the session is logged out, at the next keep-alive.
func TestStreamEndsAtLogout(t *testing.T) {
	h := openHost(t)
	s, err := New(Config{Host: h, HTTP: testHTTP(), KeepAlive: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := httptest.NewServer(s)
	defer ts.Close()
	_, cookie, _ := s.auth.login(aliceToken)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.URL+"/api/v1/approvals/stream", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: cookie})
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	evs := readEvents(t, res)
	next(t, evs, "snapshot")
	s.auth.logout(cookie)
	if ev := next(t, evs, "error"); !strings.Contains(ev.data, "not logged in") {
		t.Errorf("error: %s", ev.data)
	}
	for range evs {
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("id %q: %v", s, err)
	}
	return n
}

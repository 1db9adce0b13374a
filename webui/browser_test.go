package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
)

// browserWait bounds each step of the browser tests: a step that does not
// happen within it is a failure, never a timing assertion.
const browserWait = 2 * time.Minute

// chromiumPath finds Debian's chromium; without it the browser tests fail,
// saying how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the browser tests need Chromium, and none is on PATH: install Debian's package " +
		"(sudo apt-get update && sudo apt-get install -y chromium); .ci/run does it in CI")
	return ""
}

// browser starts a headless Chromium at 1280×800 for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelA()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// step runs actions within browserWait.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func submit(t *testing.T, h *host.Host, goal string) string {
	t.Helper()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(strings.Replace(askTask, "say hello once someone agrees", goal, 1)))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// press types a letter as a keyboard does: one keyDown carrying its text
// (which the page may cancel), one keyUp. chromedp's KeyEvent sends the
// text as an event of its own, which types it even when the page cancelled
// the key.
func press(key string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: key, Code: "Key" + strings.ToUpper(key), Text: key}
		up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: key, Code: down.Code}
		for _, p := range []input.DispatchKeyEventParams{down, up} {
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// pageServer is the API and page of h on a real listener.
func pageServer(t *testing.T, h *host.Host) string {
	t.Helper()
	s := newServer(t, h)
	ts := httptest.NewServer(s)
	s.SetListen(ts.Listener.Addr().String())
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return ts.URL
}

// rowText is the text of a task's row, read in the page in one go (a row
// may be re-rendered between a query and a read of its node).
func rowText(ctx context.Context, task string) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(document.querySelector('li.approval[data-task=%q]') || {}).textContent || ""`, task)))
}

func row(task string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`#approvals li.approval[data-task=%q]`, task))
}

// TestInboxInBrowser: in a real Chromium, a person logs in with a token,
// sees a task's approval request appear in the open inbox without reload,
// approves it with the keyboard and sees the row go and the task complete;
// then denies another with a reason and finds the denial, its approver and
// the reason in the task's live timeline.
//
// With NOETA_UPDATE_SCREENSHOT=1 it saves the inbox with a pending approval
// to docs/inbox.png.
func TestInboxInBrowser(t *testing.T) {
	h := openHost(t)
	base := pageServer(t, h)
	ctx := browser(t)

	step(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-token")),
		chromedp.SendKeys(chromedp.CSS("#login-token"), aliceToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#view-inbox")),
		chromedp.WaitVisible(chromedp.CSS("#live.on")),
		chromedp.WaitVisible(chromedp.CSS("#inbox-empty")))
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#who")))
	if err != nil || who != "alice (token)" {
		t.Fatalf("who: %q %v", who, err)
	}

	first := submit(t, h, "deploy the release to staging")
	step(t, ctx, "the request appears live", chromedp.WaitVisible(row(first)))
	text, err := rowText(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo", "agent assistant", "deploy the release to staging", `"text": "hello"`, "may answer"} {
		if !strings.Contains(text, want) {
			t.Errorf("the row lacks %q:\n%s", want, text)
		}
	}
	if os.Getenv("NOETA_UPDATE_SCREENSHOT") == "1" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "inbox.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Keyboard: the first row is selected; j/k keep it there; a approves.
	step(t, ctx, "approve with the keyboard",
		press("j"), press("k"), press("a"),
		chromedp.WaitNotPresent(row(first)))
	step(t, ctx, "the task completes",
		chromedp.Navigate(base+"/#/task/"+first),
		chromedp.WaitVisible(chromedp.CSS(`#task-status[data-status="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.ApprovalResolved`)))
	resolved, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#timeline li.ApprovalResolved`)))
	if err != nil || !strings.Contains(resolved, "approve by alice (token)") {
		t.Errorf("resolved: %q %v", resolved, err)
	}

	step(t, ctx, "the task list shows it completed",
		chromedp.Navigate(base+"/#/tasks"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#tasks-body tr[data-task=%q] .status.completed`, first))))

	// A right-to-left override in the goal is shown escaped, not obeyed.
	second := submit(t, h, "drop the staging database\u202e;lmth.emoc")
	step(t, ctx, "the second request appears",
		chromedp.Navigate(base+"/#/"),
		chromedp.WaitVisible(row(second)))
	if text, err := rowText(ctx, second); err != nil || !strings.Contains(text, `drop the staging database\u202E;lmth.emoc`) {
		t.Errorf("the goal's bidi override is not shown escaped: %q %v", text, err)
	}
	step(t, ctx, "deny with a reason",
		press("d"),
		chromedp.SendKeys(chromedp.CSS(fmt.Sprintf(`li.approval[data-task=%q] input.reason-input`, second)), "not during the freeze\r"),
		chromedp.WaitNotPresent(row(second)))
	step(t, ctx, "the denial and its reason in the timeline",
		chromedp.Navigate(base+"/#/task/"+second),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.ApprovalResolved`)))
	denied, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#timeline li.ApprovalResolved`)))
	if err != nil || !strings.Contains(denied, "deny by alice (token): not during the freeze") {
		t.Errorf("denied: %q %v", denied, err)
	}
	// Every record once, in order, whatever its type.
	gapless, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`[...document.querySelectorAll("#timeline li")].every((li, i) => Number(li.dataset.seq) === i + 1)`))
	if err != nil || !gapless {
		t.Errorf("the timeline skips or repeats a record (%v)", err)
	}
	// The task list filters by text and by status word.
	taskRow := func(id string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#tasks-body tr[data-task=%q]`, id)))
	}
	step(t, ctx, "the list filtered by text",
		chromedp.Navigate(base+"/#/tasks"),
		taskRow(first), taskRow(second),
		// pick chooses a status as a person would: the select changes.
		chromedp.Evaluate[chromedp.Void](`window.pick = (v) => { const s = document.getElementById("tasks-status"); s.value = v; s.dispatchEvent(new Event("change")); }`),
		chromedp.SendKeys(chromedp.CSS("#tasks-text"), "RELEASE to"),
		chromedp.WaitNotPresent(chromedp.CSS(fmt.Sprintf(`#tasks-body tr[data-task=%q]`, second))),
		taskRow(first))
	step(t, ctx, "a text and a status that match nothing",
		chromedp.Evaluate[chromedp.Void](`pick("cancelled")`),
		chromedp.WaitVisible(chromedp.CSS("#tasks-empty")),
		chromedp.WaitNotPresent(chromedp.CSS("#tasks-body tr")))
	step(t, ctx, "the status that matches",
		chromedp.Evaluate[chromedp.Void](`pick("completed")`),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#tasks-body tr[data-task=%q][data-status="completed"]`, first))),
		chromedp.Blur(chromedp.CSS("#tasks-text")))
	if p := os.Getenv("NOETA_TASK_SCREENSHOT"); p != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			_ = os.WriteFile(p, png, 0o644)
		}
	}
	step(t, ctx, "? opens the help",
		press("?"),
		chromedp.WaitVisible(chromedp.CSS("#help")))
}

// TestInboxLatency measures the time from an ApprovalRequested committed
// to its row in an open inbox page (over SSE), over 100 requests on the
// embedded default; it reports p50 and p99 and asserts nothing about them.
//
//	go test -race=false -count=1 -run TestInboxLatency -v ./webui
func TestInboxLatency(t *testing.T) {
	const n = 100
	cfgHost := openHostN(t, 4)
	base := pageServer(t, cfgHost)
	ctx := browser(t)
	var mu sync.Mutex
	committed := map[string]time.Time{}
	untap := cfgHost.Tap(func(_ context.Context, env eventlog.Envelope) error {
		if env.Type == noeta.TypeApprovalRequested {
			mu.Lock()
			committed[env.Task] = time.Now()
			mu.Unlock()
		}
		return nil
	})
	defer untap()
	step(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-token")),
		chromedp.SendKeys(chromedp.CSS("#login-token"), aliceToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")))
	measure := func(what string, pace time.Duration) {
		t.Helper()
		for i := range n {
			submit(t, cfgHost, fmt.Sprintf("%s %d", what, i))
			time.Sleep(pace)
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](fmt.Sprintf(`Object.keys(window.__noetaRowSeen).length >= %d`, n))); err != nil {
			t.Fatalf("the rows did not all appear: %v", err)
		}
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const s = JSON.stringify(window.__noetaRowSeen); window.__noetaRowSeen = {}; return s; })()`))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]float64{}
		if err := json.Unmarshal([]byte(raw), &seen); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var lat []time.Duration
		for key, ms := range seen {
			task, _, _ := strings.Cut(key, "/")
			c, ok := committed[task]
			if !ok {
				t.Fatalf("a row for %s whose request was not seen committed", task)
			}
			lat = append(lat, time.UnixMicro(int64(ms*1000)).Sub(c))
		}
		clear(committed)
		slices.Sort(lat)
		p := func(q float64) time.Duration {
			return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(100 * time.Microsecond)
		}
		t.Logf("%s: ApprovalRequested committed → row in the page, %d requests: p50 %v, p99 %v, max %v",
			what, len(lat), p(0.50), p(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
	}
	// One request at a time (a request every 50 ms), then all at once.
	measure("paced", 50*time.Millisecond)
	measure("burst", 0)
}

// TestQuestionInBrowser: a task's question appears in the inbox with an
// answer field and no approve/deny; the typed answer wakes the task, which
// completes.
func TestQuestionInBrowser(t *testing.T) {
	h := openHost(t)
	base := pageServer(t, h)
	ctx := browser(t)
	step(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-token")),
		chromedp.SendKeys(chromedp.CSS("#login-token"), aliceToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")))
	tf, err := policy.ParseTaskFile("task.yaml", []byte(`
agent: assistant
goal: "pick a region"
script:
  - yield_for_human: {question: "which region?"}
  - finish: {answer: done}
`))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "the question appears", chromedp.WaitVisible(row(id)))
	if text, err := rowText(ctx, id); err != nil || !strings.Contains(text, "which region?") {
		t.Fatalf("row: %q %v", text, err)
	}
	step(t, ctx, "answer it",
		chromedp.WaitNotVisible(chromedp.CSS(fmt.Sprintf(`li.approval[data-task=%q] button.deny`, id))),
		chromedp.SendKeys(chromedp.CSS(fmt.Sprintf(`li.approval[data-task=%q] input.reason-input`, id)), "eu-west-1\r"),
		chromedp.WaitNotPresent(row(id)),
		chromedp.Navigate(base+"/#/task/"+id),
		chromedp.WaitVisible(chromedp.CSS(`#task-status[data-status="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.TaskWoken`)))
	// The answer is shown as an answer, with who gave it; every record has
	// its time, and its payload folded away until opened.
	woken, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#timeline li.TaskWoken .d`)))
	if err != nil || woken != "question-1 answered \u201ceu-west-1\u201d by alice (token)" {
		t.Errorf("the answer in the timeline: %q %v", woken, err)
	}
	timed, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`[...document.querySelectorAll("#timeline li")].every((li) => /^\d\d:\d\d:\d\d\.\d{3}$/.test(li.querySelector("time.at").textContent))`))
	if err != nil || !timed {
		t.Errorf("a record without its time (%v)", err)
	}
	step(t, ctx, "a payload opens",
		chromedp.Click(chromedp.CSS(`#timeline li.TaskCreated details.payload summary`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.TaskCreated details.payload[open] pre`)))
	created, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#timeline li.TaskCreated details.payload pre`)))
	if err != nil || !strings.Contains(created, `"goal": "pick a region"`) {
		t.Errorf("TaskCreated's payload: %q %v", created, err)
	}
}

// TestQuorumInBrowser: a request that needs two approvers shows its quorum;
// the first approval updates the row in place (1/2, by whom) and leaves it
// open; the second, from another person, resolves it.
func TestQuorumInBrowser(t *testing.T) {
	h := openHostWith(t, 1, approvalYAML+`
approvals:
  rules:
    - name: two-for-echo
      when: 'tool == "echo"'
      quorum: 2
`)
	s, err := New(Config{Host: h, HTTP: config.HTTP{Tokens: []config.HTTPToken{
		{Name: "alice", SHA256: tokenHash(aliceToken)}, {Name: "bob", SHA256: tokenHash("bob-token")},
	}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	ctx := browser(t)
	step(t, ctx, "log in",
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-token")),
		chromedp.SendKeys(chromedp.CSS("#login-token"), aliceToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")))
	id := submit(t, h, "two keys")
	step(t, ctx, "the request shows its quorum", chromedp.WaitVisible(row(id)))
	if text, err := rowText(ctx, id); err != nil || !strings.Contains(text, "quorum 0/2") {
		t.Fatalf("row: %q %v", text, err)
	}
	step(t, ctx, "alice approves; the row stays, counted",
		press("a"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`li.approval[data-task=%q] .quorum[data-count="1"]`, id))))
	// Read in the page in one go: the row may be re-rendered meanwhile.
	pctx, pcancel := context.WithTimeout(ctx, browserWait)
	defer pcancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[bool](fmt.Sprintf(
		`(document.querySelector('li.approval[data-task=%q]') || {}).textContent?.includes("quorum 1/2 (alice)")`, id))); err != nil {
		t.Fatalf("the row does not name alice's approval: %v", err)
	}
	// The row shows the count once ApprovalCounted is in the index, which
	// can be just before the task waits again: bob answers once it does.
	wctx, cancel := context.WithTimeout(t.Context(), browserWait)
	defer cancel()
	if rest, err := h.Wait(wctx, id); err != nil || rest.Status != host.RestWaiting {
		t.Fatalf("the task did not wait again: %+v %v", rest, err)
	}
	handle, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('li.approval[data-task=%q]').dataset.handle`, id)))
	if err != nil {
		t.Fatal(err)
	}
	w := do(s, req{method: "POST", path: "/api/v1/tasks/" + id + "/approvals/" + handle, body: `{"decision":"approve"}`, hdr: jsonPost("bob-token", map[string]string{"Host": ts.Listener.Addr().String()})})
	if w.Code != 200 {
		t.Fatalf("bob: %d %s", w.Code, w.Body)
	}
	step(t, ctx, "bob's approval resolves it", chromedp.WaitNotPresent(row(id)))
}

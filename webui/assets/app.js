// The inbox page: plain JavaScript, no build step. Everything from the
// server is put into the page as text (textContent), never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  me: null,
  approvals: new Map(), // "task/handle" -> entry
  selected: null,       // key of the selected approval
  filter: "",
  inboxSource: null,
  taskSource: null,
  tasksCursor: 0,
  tasksGen: 0,
  pendingG: false,
};
// When each approval row entered the page (ms since the epoch): read by the
// browser test to measure how fast a request reaches an open inbox.
window.__noetaRowSeen = {};

// Control and bidi characters from a task (its goal, a tool's arguments, a
// reason) are shown escaped: a right-to-left override could otherwise make
// the action a person approves read as another.
const hidden = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u061C\u200B-\u200F\u2028-\u202E\u2060-\u2069\uFEFF]/g;
function shown(s) {
  return String(s).replace(hidden, (c) => "\\u" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0"));
}

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = shown(v);
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  const ct = res.headers.get("Content-Type") || "";
  if (ct.includes("json")) data = await res.json();
  if (res.status === 401 && path !== "/api/v1/login") showLogin();
  return { ok: res.ok, status: res.status, data };
}

function age(seconds) {
  if (seconds < 60) return Math.max(0, Math.round(seconds)) + "s";
  if (seconds < 3600) return Math.round(seconds / 60) + "m";
  if (seconds < 86400) return Math.round(seconds / 3600) + "h";
  return Math.round(seconds / 86400) + "d";
}

function sinceISO(iso) {
  const t = Date.parse(iso);
  return isNaN(t) ? 0 : (Date.now() - t) / 1000;
}

function ageText(requested, expires) {
  const expiry = expires ? "expires in " + age(-sinceISO(expires)) : "no expiry";
  return "waiting " + age(sinceISO(requested)) + " · " + expiry;
}

// The ages move on without a re-render (which would drop a reason being typed).
function tickAges() {
  for (const e of document.querySelectorAll(".approval .age")) {
    e.textContent = ageText(e.dataset.requested, e.dataset.expires);
  }
}

function pretty(raw) {
  if (raw == null) return "";
  try { return JSON.stringify(typeof raw === "string" ? JSON.parse(raw) : raw, null, 2); } catch { return String(raw); }
}

// ---- views ----

function show(view) {
  for (const v of ["login", "inbox", "tasks", "task"]) $("view-" + v).hidden = v !== view;
  $("nav-inbox").classList.toggle("active", view === "inbox");
  $("nav-tasks").classList.toggle("active", view === "tasks" || view === "task");
}

function showLogin(msg) {
  state.me = null;
  closeSources();
  $("who").textContent = "";
  $("logout").hidden = true;
  show("login");
  $("login-error").textContent = shown(msg || "");
  $("login-token").focus();
}

function closeSources() {
  if (state.inboxSource) { state.inboxSource.close(); state.inboxSource = null; }
  if (state.taskSource) { state.taskSource.close(); state.taskSource = null; }
  setLive(false);
}

function setLive(on) {
  $("live").textContent = on ? "live" : "offline";
  $("live").classList.toggle("on", on);
}

async function login(token) {
  const r = await api("POST", "/api/v1/login", { token });
  if (!r.ok) {
    showLogin((r.data && r.data.detail) || "login failed");
    return false;
  }
  return true;
}

async function start() {
  const r = await api("GET", "/api/v1/whoami");
  if (!r.ok) { showLogin(); return; }
  state.me = r.data;
  $("who").textContent = shown(r.data.name + " (" + r.data.auth + ")");
  $("logout").hidden = false;
  startInbox();
  route();
}

function route() {
  if (!state.me) return;
  const h = location.hash || "#/";
  if (state.taskSource) { state.taskSource.close(); state.taskSource = null; }
  if (h.startsWith("#/task/")) {
    openTask(decodeURIComponent(h.slice("#/task/".length)));
  } else if (h === "#/tasks") {
    show("tasks");
    reloadTasks();
  } else {
    show("inbox");
    renderInbox();
    loadPins();
  }
}

// ---- tool pins to review ----

async function loadPins() {
  const r = await api("GET", "/api/v1/pins");
  const list = $("pins-list");
  list.replaceChildren();
  const pins = r.ok && r.data.pins ? r.data.pins : [];
  for (const p of pins) {
    list.append(el("li", { class: "pin" },
      el("span", { class: "tool", text: shown("mcp__" + p.server + "__" + p.tool) }),
      el("span", { class: "meta", text: "pinned " + p.pinned_sha256.slice(0, 12) + "… now " + p.pending_sha256.slice(0, 12) + "…" }),
      el("code", { text: shown(p.accept) })));
  }
  $("pins").hidden = pins.length === 0;
}

// ---- inbox ----

function keyOf(a) { return a.task + "/" + a.handle; }

function startInbox() {
  if (state.inboxSource) return;
  const es = new EventSource("/api/v1/approvals/stream");
  state.inboxSource = es;
  es.addEventListener("open", () => setLive(true));
  es.addEventListener("error", () => setLive(false));
  es.addEventListener("snapshot", (ev) => {
    const d = JSON.parse(ev.data);
    const now = Date.now();
    state.approvals.clear();
    for (const a of d.approvals) {
      a._seenAt = now - a.age_seconds * 1000;
      state.approvals.set(keyOf(a), a);
    }
    renderInbox();
  });
  es.addEventListener("put", (ev) => {
    const a = JSON.parse(ev.data);
    a._seenAt = Date.now() - a.age_seconds * 1000;
    state.approvals.set(keyOf(a), a);
    renderInbox();
  });
  es.addEventListener("delete", (ev) => {
    const d = JSON.parse(ev.data);
    state.approvals.delete(keyOf(d));
    renderInbox();
  });
}

function matches(a) {
  const f = state.filter.trim().toLowerCase();
  if (!f) return true;
  return [a.task, a.agent, a.tool, a.action, a.guard, a.reason, a.goal, a.question]
    .some((s) => (s || "").toLowerCase().includes(f));
}

function visibleApprovals() {
  return [...state.approvals.values()].filter(matches)
    .sort((x, y) => Date.parse(x.requested_at) - Date.parse(y.requested_at));
}

function renderInbox() {
  const list = $("approvals");
  const items = visibleApprovals();
  $("inbox-count").textContent = String(state.approvals.size);
  $("inbox-empty").hidden = items.length > 0;
  const keep = new Map();
  for (const li of list.children) keep.set(li.dataset.key, li);
  const want = new Set(items.map(keyOf));
  for (const [k, li] of keep) if (!want.has(k)) li.remove();
  let prev = null;
  for (const a of items) {
    const k = keyOf(a);
    let li = keep.get(k);
    if (!li || li._entry !== a) {
      const fresh = renderApproval(a);
      if (li) {
        // An update (a quorum count) keeps what the person was doing: the
        // timeline shown, the reason typed, the focus.
        fresh.querySelector(".recent").replaceWith(li.querySelector(".recent"));
        const oldIn = li.querySelector(".reason-input"), newIn = fresh.querySelector(".reason-input");
        newIn.value = oldIn.value;
        const focused = document.activeElement === oldIn;
        li.replaceWith(fresh);
        if (focused) newIn.focus();
      }
      li = fresh;
      if (!window.__noetaRowSeen[k]) window.__noetaRowSeen[k] = performance.timeOrigin + performance.now();
    }
    if (prev ? prev.nextSibling !== li : list.firstChild !== li) {
      if (prev) prev.after(li); else list.prepend(li);
    }
    prev = li;
  }
  if (!state.selected || !want.has(state.selected)) state.selected = items.length ? keyOf(items[0]) : null;
  markSelected();
}

function renderApproval(a) {
  const k = keyOf(a);
  const what = a.kind === "question" ? "question" : (a.tool || a.action || "approval");
  // A question is answered with text (sent as an approval whose reason is
  // the answer); an approval with approve or deny.
  const question = a.kind === "question";
  const reasonIn = el("input", { type: "text", placeholder: question ? "your answer" : "reason (required to deny)",
    "aria-label": question ? "answer" : "reason", maxLength: 4000 });
  reasonIn.className = "reason-input";
  const approve = el("button", { type: "button", class: "approve", text: question ? "Answer" : "Approve" });
  const deny = el("button", { type: "button", class: "deny", text: "Deny", hidden: question });
  const result = el("span", { class: "result" });
  const quorum = a.quorum > 1 ? "quorum " + (a.approvals ? a.approvals.length : 0) + "/" + a.quorum
    + (a.approvals && a.approvals.length ? " (" + a.approvals.join(", ") + ")" : "") : null;
  const li = el("li", { class: "approval", tabIndex: -1, "data-key": k, "data-task": a.task, "data-handle": a.handle },
    el("div", { class: "head" },
      el("span", { class: "tool", text: what }),
      el("span", { class: "meta", text: "agent " + (a.agent || "?") }),
      el("a", { href: "#/task/" + encodeURIComponent(a.task), class: "meta", text: a.task }),
      el("span", { class: "meta age", "data-requested": a.requested_at || "", "data-expires": a.expires_at || "",
        text: ageText(a.requested_at, a.expires_at) }),
      quorum && el("span", { class: "meta quorum", "data-count": String(a.approvals ? a.approvals.length : 0), text: quorum })),
    el("p", { class: "reason" },
      el("span", { class: "guard", text: (a.guard || "guard") + ": " }),
      document.createTextNode(shown(a.reason || a.question || ""))),
    a.goal ? el("p", { class: "goal", text: "Goal: " + a.goal }) : null,
    a.args ? el("pre", { class: "args", tabIndex: 0, text: pretty(a.args) + (a.args_cut ? "\n… (cut; the task's log has it whole)" : "") }) : null,
    a.child_agent ? el("p", { class: "meta", text: "child agent: " + a.child_agent }) : null,
    el("p", { class: "meta", text: "may answer: " + (a.may_answer || (a.rules && a.rules.length ? a.rules.join(", ") : "anyone logged in")) }),
    el("div", { class: "actions" }, approve, deny, reasonIn, result),
    el("ol", { class: "recent", hidden: true }));
  li._entry = a;
  approve.addEventListener("click", () => {
    if (question && !reasonIn.value.trim()) { reasonIn.focus(); result.textContent = "type the answer"; return; }
    answer(li, a, "approve");
  });
  deny.addEventListener("click", () => {
    if (!reasonIn.value.trim()) { reasonIn.focus(); result.textContent = "give a reason to deny"; return; }
    answer(li, a, "deny");
  });
  reasonIn.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") { ev.preventDefault(); (question ? approve : deny).click(); }
    if (ev.key === "Escape") { reasonIn.blur(); li.focus(); }
  });
  li.addEventListener("click", (ev) => {
    if (ev.target.closest("button, input, a, pre")) return;
    state.selected = k;
    markSelected();
    toggleRecent(li, a);
  });
  return li;
}

async function answer(li, a, decision) {
  const reason = li.querySelector(".reason-input").value.trim();
  const result = li.querySelector(".result");
  for (const b of li.querySelectorAll("button")) b.disabled = true;
  result.className = "result";
  result.textContent = a.kind === "question" ? "answering…" : decision === "approve" ? "approving…" : "denying…";
  const r = await api("POST", "/api/v1/tasks/" + encodeURIComponent(a.task) + "/approvals/" + encodeURIComponent(a.handle),
    { decision, reason });
  if (r.ok) {
    result.textContent = a.kind === "question" ? "answered" : decision === "approve" ? "approved" : "denied";
    return; // the row goes when the index says so
  }
  for (const b of li.querySelectorAll("button")) b.disabled = false;
  result.className = "result error";
  result.textContent = shown((r.data && (r.data.detail || r.data.title)) || ("failed: " + r.status));
}

async function toggleRecent(li, a) {
  const ol = li.querySelector(".recent");
  if (!ol.hidden) { ol.hidden = true; return; }
  ol.hidden = false;
  ol.replaceChildren(el("li", { text: "loading…" }));
  const after = Math.max(0, (a.seq || 0) - 15);
  const r = await api("GET", "/api/v1/tasks/" + encodeURIComponent(a.task) + "/events?after=" + after);
  if (!r.ok) { ol.replaceChildren(el("li", { text: (r.data && r.data.detail) || "failed" })); return; }
  ol.replaceChildren(...r.data.events.map(timelineItem));
}

function markSelected() {
  for (const li of $("approvals").children) {
    const on = li.dataset.key === state.selected;
    li.classList.toggle("selected", on);
  }
}

function selectedRow() {
  return [...$("approvals").children].find((li) => li.dataset.key === state.selected) || null;
}

function move(delta) {
  const rows = [...$("approvals").children];
  if (!rows.length) return;
  let i = rows.findIndex((li) => li.dataset.key === state.selected);
  i = Math.min(rows.length - 1, Math.max(0, (i < 0 ? 0 : i + delta)));
  state.selected = rows[i].dataset.key;
  markSelected();
  rows[i].focus();
  rows[i].scrollIntoView({ block: "nearest" });
}

// ---- tasks ----

// tasksQuery is the list's filter as the API's query: status words, agent,
// text.
function tasksQuery() {
  const q = new URLSearchParams({ limit: "50", cursor: String(state.tasksCursor) });
  if ($("tasks-status").value) q.set("status", $("tasks-status").value);
  if ($("tasks-agent").value.trim()) q.set("agent", $("tasks-agent").value.trim());
  if ($("tasks-text").value.trim()) q.set("q", $("tasks-text").value.trim());
  return q.toString();
}

// reloadTasks shows the first page of the list under the filter as it is
// now; a reply to an older filter that arrives late is dropped.
function reloadTasks() {
  state.tasksCursor = 0;
  $("tasks-body").replaceChildren();
  loadTasks();
}

async function loadTasks() {
  const gen = ++state.tasksGen;
  const first = state.tasksCursor === 0;
  const r = await api("GET", "/api/v1/tasks?" + tasksQuery());
  if (gen !== state.tasksGen) return;
  const body = $("tasks-body");
  if (!r.ok) {
    $("tasks-empty").textContent = shown((r.data && r.data.detail) || "cannot list the tasks");
    $("tasks-empty").hidden = false;
    return;
  }
  if (first) body.replaceChildren();
  for (const t of r.data.tasks) {
    body.append(el("tr", { "data-task": t.task, "data-status": t.status },
      el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(t.task), text: t.task })),
      el("td", { text: t.agent || "" }),
      el("td", {}, el("span", { class: "status " + t.status, text: t.status + (t.waiting ? " (" + t.waiting.length + ")" : "") })),
      el("td", { class: "goal", text: t.goal || "", title: t.goal || "" }),
      el("td", { text: age(t.age_seconds) + " ago" })));
  }
  $("tasks-empty").textContent = "No task matches.";
  // A short page with a cursor has more to read: the filter matched little
  // of what one request may fold.
  $("tasks-empty").hidden = body.children.length > 0 || !!r.data.next_cursor;
  state.tasksCursor = r.data.next_cursor || 0;
  $("tasks-more").hidden = !r.data.next_cursor;
}

function describe(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "PolicyDecided": return decided(p);
    case "TaskCreated": return "agent " + p.agent + ": " + (p.goal || "") + (p.submitted_by ? " (by " + p.submitted_by + ")" : "");
    case "ApprovalRequested": return (p.tool || p.action) + " " + pretty(p.args).slice(0, 300) + " — " + p.guard + ": " + p.reason;
    case "ApprovalResolved": return p.decision + " by " + p.approver + (p.auth ? " (" + p.auth + ")" : "") + (p.reason ? ": " + p.reason : "");
    case "ApprovalCounted": case "ApprovalRefused": return pretty(p).slice(0, 400);
    case "ToolCallStarted": return p.tool + " " + pretty(p.args).slice(0, 300);
    case "ToolCallFinished": return (p.tool || "") + (p.is_error ? " error" : " ok");
    case "ToolCallDenied": return (p.tool || "") + " denied by " + (p.guard || "?") + ": " + (p.reason || "");
    // A shadow rule decided nothing: the line says what it would have done
    // beside what was decided, so it is never read as a verdict.
    case "GuardShadowed": return "shadow " + (p.guard || "?") + (p.rule ? " " + p.rule : "") + " on " + (p.tool || p.action || "") +
      ": would " + p.verdict + (p.failed ? " (failed)" : "") + ", decided " + p.decided + (p.decided_by ? " by " + p.decided_by : "") + ": " + (p.reason || "");
    case "TaskSuspended": return p.reason || "";
    case "TaskWoken": return woken(p.wake_event || {});
    case "TaskCompleted": return "answer: " + pretty(p.answer).slice(0, 400);
    case "TaskFailed": return p.error || p.reason || pretty(p).slice(0, 300);
    case "TaskCancelled": return p.reason || "";
    default: return "";
  }
}

// decided is a model turn's line: what it decided, who decided, what it
// cost.
function decided(p) {
  let s = "turn " + p.turn + ": " + p.decision;
  if (p.model) s += " · " + p.model + (p.provider ? " (" + p.provider + ")" : "");
  if (p.input_tokens || p.output_tokens) s += " · tokens " + (p.input_tokens || 0) + " in / " + (p.output_tokens || 0) + " out";
  if (p.cost_usd) s += " · $" + String(Number(Number(p.cost_usd).toPrecision(4)));
  if (p.latency_ms) s += " · " + p.latency_ms + " ms";
  return s;
}

// said is what the model said beside its decision, whole (the record holds
// it whole; docs/adr/0084), or where the content store holds it; null for a
// decision made without words.
function said(ev) {
  const p = ev.payload || {};
  if (ev.type !== "PolicyDecided") return null;
  if (p.text_ref) return el("div", { class: "said ref", text: "said: " + p.text_ref.size + " bytes in the content store, sha256 " + String(p.text_ref.hash).slice(0, 12) + "…" });
  if (p.text) return el("div", { class: "said", text: p.text });
  return null;
}

// clock is a record's time as the timeline shows it: the local time of day
// to the millisecond; the whole time is the element's title.
function clock(t) {
  const d = new Date(t);
  if (isNaN(d)) return "";
  const p = (n, w) => String(n).padStart(w || 2, "0");
  return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + p(d.getMilliseconds(), 3);
}

// payload is a record's whole payload, folded away until opened; a body
// kept in the content store is named with the command that prints it.
function payload(ev) {
  const text = pretty(ev.payload);
  if (!text || text === "{}") return null;
  const refs = JSON.stringify(ev.payload || {}).includes('_ref":{"hash"');
  return el("details", { class: "payload" },
    el("summary", { text: "payload" + (ev.actor ? " · " + ev.actor : "") }),
    el("pre", { text: text }),
    refs ? el("div", { class: "hint", text: "bodies in the content store: engine content " + ev.task + " " + ev.seq + " [--field NAME]" }) : null);
}

// woken is what woke a task; a person's reply to a question is its words.
function woken(w) {
  if (w.kind !== "human_response") return "by " + (w.kind || "?");
  const who = w.approver ? " by " + w.approver + (w.auth ? " (" + w.auth + ")" : "") : "";
  if (w.text && !String(w.handle).startsWith("approval-")) return w.handle + " answered \u201c" + w.text + "\u201d" + who;
  return w.handle + " " + (w.decision || "") + who;
}

function timelineItem(ev) {
  return el("li", { class: ev.type, "data-seq": String(ev.seq) },
    el("span", { class: "seq", text: "#" + ev.seq }),
    el("time", { class: "at", text: clock(ev.time), title: ev.time || "", dateTime: ev.time || "" }),
    el("span", { class: "t", text: ev.type }),
    el("span", { class: "d", text: describe(ev) }),
    said(ev),
    payload(ev));
}

async function openTask(id) {
  show("task");
  $("task-title").textContent = "Task " + id;
  $("task-goal").textContent = "";
  $("task-status").textContent = "";
  const tl = $("timeline");
  tl.replaceChildren();
  tl.dataset.task = id;
  const r = await api("GET", "/api/v1/tasks/" + encodeURIComponent(id));
  if (r.ok) {
    $("task-goal").textContent = shown((r.data.agent ? "agent " + r.data.agent + " · " : "") + (r.data.goal || ""));
    setStatus(r.data.status);
  } else {
    $("task-goal").textContent = shown((r.data && r.data.detail) || "cannot read the task");
    return;
  }
  const es = new EventSource("/api/v1/tasks/" + encodeURIComponent(id) + "/events");
  state.taskSource = es;
  const seen = new Set();
  const onEvent = (ev) => {
    const rec = JSON.parse(ev.data);
    if (seen.has(rec.seq)) return;
    seen.add(rec.seq);
    tl.append(timelineItem(rec));
    if (ends[rec.type]) setStatus(ends[rec.type]);
    else if (rec.type === "TaskSuspended") setStatus(rec.payload && rec.payload.wake_on && rec.payload.wake_on.kind === "human_response" ? "waiting" : "suspended");
    else if (rec.type === "TaskWoken" || rec.type === "TurnStarted") setStatus("running");
  };
  es.addEventListener("record", onEvent);
  es.addEventListener("open", () => setLive(true));
}

// ends are the status words of a task's terminal records.
const ends = { TaskCompleted: "completed", TaskFailed: "failed", TaskCancelled: "cancelled" };

function setStatus(s) {
  const e = $("task-status");
  e.textContent = s;
  e.className = "status " + s;
  e.dataset.status = s;
}

// ---- keys ----

function onKey(ev) {
  const t = ev.target;
  const typing = t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement;
  if (ev.key === "Escape" && typing) { t.blur(); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey || !state.me) return;
  if (state.pendingG) {
    state.pendingG = false;
    if (ev.key === "i") { location.hash = "#/"; return; }
    if (ev.key === "t") { location.hash = "#/tasks"; return; }
  }
  const inInbox = !$("view-inbox").hidden;
  switch (ev.key) {
    case "?": ev.preventDefault(); $("help").showModal(); return;
    case "g": state.pendingG = true; return;
    case "/":
      if (inInbox) { ev.preventDefault(); $("filter").focus(); }
      else if (!$("view-tasks").hidden) { ev.preventDefault(); $("tasks-text").focus(); }
      return;
  }
  if (!inInbox) return;
  const row = selectedRow();
  switch (ev.key) {
    case "j": ev.preventDefault(); move(1); break;
    case "k": ev.preventDefault(); move(-1); break;
    case "Enter": if (row && t === row) { ev.preventDefault(); toggleRecent(row, row._entry); } break;
    case "a": if (row) { ev.preventDefault(); row.querySelector("button.approve").click(); } break;
    case "d": if (row) { ev.preventDefault(); row.querySelector(".reason-input").focus(); } break;
  }
}

// ---- start ----

document.addEventListener("DOMContentLoaded", async () => {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (await login($("login-token").value)) { $("login-token").value = ""; start(); }
  });
  $("logout").addEventListener("click", async () => {
    await api("POST", "/api/v1/logout", {});
    showLogin("logged out");
  });
  $("filter").addEventListener("input", () => { state.filter = $("filter").value; renderInbox(); });
  $("tasks-more").addEventListener("click", loadTasks);
  $("tasks-status").addEventListener("change", reloadTasks);
  $("tasks-filter").addEventListener("submit", (ev) => { ev.preventDefault(); reloadTasks(); });
  let typing = null;
  for (const id of ["tasks-agent", "tasks-text"]) {
    $(id).addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(reloadTasks, 250); });
  }
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", route);
  setInterval(tickAges, 10000);
  // engine ui's login URL carries a one-time token in the fragment, which
  // never reaches a server log.
  if (location.pathname === "/login") {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    history.replaceState(null, "", "/#/");
    if (m && !(await login(decodeURIComponent(m[1])))) return;
  }
  start();
});

// The page: session list, the selected session's event stream, and the controls that call
// the API. State shown comes from session events (see render.js); the API only acts.
"use strict";

const $ = (id) => document.getElementById(id);
const app = { info: null, id: null, source: null, conv: null, usageOpen: false };

async function api(path, body) {
  const init = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = data.error ? `${data.error.code}: ${data.error.message}` : `HTTP ${response.status}`;
    toast(message);
    throw new Error(message);
  }
  return data;
}

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

function ago(ms) {
  const s = (Date.now() - ms) / 1000;
  if (s < 60) return "now";
  if (s < 3600) return Math.floor(s / 60) + " min";
  if (s < 86400) return Math.floor(s / 3600) + " h";
  return new Date(ms).toLocaleDateString();
}

async function loadSessions() {
  let data;
  try { data = await api("/api/sessions"); } catch { return; }
  const nav = $("session-list");
  nav.replaceChildren();
  for (const ws of data.workspaces) {
    const group = nav.appendChild(el("section", "workspace"));
    const head = group.appendChild(el("div", "ws-head"));
    head.append(el("span", "ws-name", ws.cwd.split("/").filter(Boolean).pop() || "/"), el("span", "ws-path", ws.cwd));
    head.title = ws.cwd;
    const add = head.appendChild(el("button", "link", "+"));
    add.title = "New session in " + ws.cwd;
    add.addEventListener("click", () => createSession(ws.cwd));
    for (const s of ws.sessions) {
      const row = group.appendChild(el("a", "session" + (s.id === app.id ? " selected" : "")));
      row.href = "#/s/" + s.id;
      row.append(el("span", "s-title", s.title || "untitled"));
      const meta = row.appendChild(el("span", "s-meta"));
      if (s.running) meta.append(el("span", "dot running", "●"));
      else if (s.live) meta.append(el("span", "dot live", "●"));
      meta.append(`${ago(s.updatedAt)} · ${fmt.cost(s.costUsd)}`);
      row.title = `${s.id}\n${s.turns} turns · ${fmt.tokens(s.tokens)} tokens` + (s.parentSession ? `\nforked from ${s.parentSession}` : "");
    }
  }
  if (!data.workspaces.length) nav.append(el("div", "empty", "No sessions yet."));
}

async function createSession(cwd) {
  const data = await api("/api/sessions", { cwd });
  $("new-form").hidden = true;
  location.hash = "#/s/" + data.id;
  loadSessions();
}

function select(id) {
  if (app.source) app.source.close();
  app.id = id;
  document.querySelectorAll(".session.selected").forEach((n) => n.classList.remove("selected"));
  document.querySelector(`.session[href="#/s/${CSS.escape(id)}"]`)?.classList.add("selected");
  app.conv.reset();
  $("session-head").hidden = false;
  $("composer").hidden = false;
  $("export-md").href = `/api/sessions/${id}/export?format=md`;
  $("export-jsonl").href = `/api/sessions/${id}/export?format=jsonl`;
  refreshDetail();
  // EventSource reconnects by itself with Last-Event-ID, so the stream resumes where it was.
  const source = new EventSource(`/api/sessions/${encodeURIComponent(id)}/events`);
  app.source = source;
  let batch = [];
  source.onmessage = (message) => {
    let ev;
    try { ev = JSON.parse(message.data); } catch { return; }
    batch.push(ev);
    if (batch.length === 1) queueMicrotask(() => flushEvents(batch.splice(0)));
  };
  source.onerror = () => { $("status").textContent = "reconnecting…"; };
  source.onopen = () => updateState();
}

function flushEvents(events) {
  const box = $("conversation");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  let listChanged = false;
  for (const ev of events) {
    app.conv.apply(ev);
    if (ev.type === "turn/end" || ev.type === "turn/start" || ev.type === "session/title") listChanged = true;
  }
  updateState();
  if (atBottom) box.scrollTop = box.scrollHeight;
  if (listChanged) { clearTimeout(flushEvents.timer); flushEvents.timer = setTimeout(loadSessions, 300); }
}

async function refreshDetail() {
  if (!app.id) return;
  const id = app.id;
  let d;
  try { d = await api(`/api/sessions/${id}`); } catch { return; }
  if (id !== app.id) return;
  if (d.live) {
    $("model").value = d.model || "";
    $("effort").value = d.effort || "default";
  }
  app.detail = d;
  updateState();
}

function updateState() {
  const c = app.conv;
  $("title").textContent = c.title || "untitled";
  document.title = (c.title || "dsh") + " · dsh";
  $("state").textContent = c.running ? "running" : app.detail?.live ? "idle" : "stored (read-only until you send)";
  $("state").className = "badge " + (c.running ? "running" : "");
  const perm = c.permission || app.detail?.permission;
  $("perm").textContent = perm ? perm + (c.sandbox?.mode ? " · sandbox " + c.sandbox.mode : "") : "permission: default";
  $("perm").title = c.sandbox?.detail || "Permission preset of the session's tools";
  if (!$("model").value && c.model) $("model").value = c.model;
  $("cancel").disabled = !c.running;
  $("steer").disabled = !c.running;
  $("send").textContent = c.running ? "Queue" : "Send";
  $("status").textContent = c.running ? "working…" : "";
  const q = $("queue");
  const queued = [...(c.inbox["next-step"] || []).map((t) => ["steer", t]), ...(c.inbox["next-turn"] || []).map((t) => ["queued", t])];
  q.hidden = !queued.length;
  q.replaceChildren(...queued.map(([kind, text]) => el("div", "queued", `${kind}: ${text}`)));
  if (app.usageOpen) renderUsage();
}

function renderUsage() {
  const { total, perRequest } = usageSummary(app.conv.requests, app.info?.prices);
  const panel = $("usage");
  panel.replaceChildren();
  const grid = panel.appendChild(el("div", "usage-grid"));
  const cell = (label, value) => { const c = grid.appendChild(el("div", "cell")); c.append(el("span", "label", label), el("span", "value", value)); };
  cell("requests", String(perRequest.length));
  cell("input (uncached)", fmt.tokens(total.input));
  cell("cache read", fmt.tokens(total.cacheRead));
  cell("cache write", fmt.tokens(total.cacheWrite));
  cell("output", fmt.tokens(total.output));
  cell("reasoning", fmt.tokens(total.reasoning));
  cell("cache hit", fmt.pct(total.hit));
  cell("cost", fmt.cost(total.cost) + (total.unknownCost ? " + ?" : ""));
  if (perRequest.length) {
    panel.append(el("div", "label", "cost per request (shade: cache hit ≥80% / ≥40% / less)"), costChart(perRequest));
  }
}

function send(mode) {
  const input = $("input");
  const text = input.value;
  if (!text.trim() || !app.id) return;
  api(`/api/sessions/${app.id}/prompt`, { text, mode }).then(() => {
    input.value = "";
    if (!app.detail?.live) refreshDetail();
  }, () => {});
}

async function fork(turn) {
  const data = await api(`/api/sessions/${app.id}/fork`, turn ? { atTurn: turn } : {});
  location.hash = "#/s/" + data.id;
  loadSessions();
}

function route() {
  const m = /^#\/s\/([\w-]+)$/.exec(location.hash);
  if (m && m[1] !== app.id) select(m[1]);
}

async function start() {
  app.conv = new Conversation($("conversation"), {
    approve: (id, decision) => {
      let message;
      if (decision === "reject") message = window.prompt("Reason for the model (optional):", "") || undefined;
      api(`/api/sessions/${app.id}/approvals/${encodeURIComponent(id)}`, { decision, message }).catch(() => {});
    },
    fork: (turn) => fork(turn).catch(() => {}),
  });
  try { app.info = await api("/api/info"); } catch { return; }
  $("models").replaceChildren(...(app.info.models || []).map((m) => Object.assign(el("option"), { value: m })));
  $("new-cwd").value = app.info.defaultCwd;
  $("new-session").addEventListener("click", () => { $("new-form").hidden = false; $("new-cwd").focus(); });
  $("new-cancel").addEventListener("click", () => { $("new-form").hidden = true; });
  $("new-form").addEventListener("submit", (e) => { e.preventDefault(); createSession($("new-cwd").value).catch(() => {}); });
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send("followup"); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send("followup"); }
  });
  $("steer").addEventListener("click", () => send("steer"));
  $("cancel").addEventListener("click", () => api(`/api/sessions/${app.id}/cancel`, { keepInbox: false }).catch(() => {}));
  $("apply-call").addEventListener("click", () => {
    api(`/api/sessions/${app.id}/call`, { model: $("model").value, effort: $("effort").value })
      .then((r) => toast(`from the next request: ${r.model}, effort ${r.effort || "default"}`), () => {});
  });
  $("compact").addEventListener("click", () => api(`/api/sessions/${app.id}/compact`, {}).catch(() => {}));
  $("fork").addEventListener("click", () => fork(null).catch(() => {}));
  $("toggle-usage").addEventListener("click", () => {
    app.usageOpen = !app.usageOpen;
    $("usage").hidden = !app.usageOpen;
    if (app.usageOpen) renderUsage();
  });
  $("title").addEventListener("click", () => {
    const title = window.prompt("Rename the session:", app.conv.title || "");
    if (title && title.trim()) api(`/api/sessions/${app.id}/title`, { title }).catch(() => {});
  });
  window.addEventListener("hashchange", route);
  await loadSessions();
  route();
  setInterval(loadSessions, 10000);
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", start);

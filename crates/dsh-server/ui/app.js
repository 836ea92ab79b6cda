// The page: session list, the selected session's event stream, and the controls that call
// the API. State shown comes from session events (see render.js); the API only acts.
"use strict";

const $ = (id) => document.getElementById(id);
const app = { info: null, id: null, workspaces: [], sessions: [], sessionsRun: 0, olderPages: false, loadingMore: false, moreObserver: null, nextSessions: null, source: null, conv: null, usageOpen: false, commands: [], permissionPending: null, cwds: {}, trust: null };

// Commands of the page itself; they win over session commands (skills) of the same name.
const BUILTINS = [
  { name: "compact", args: "", description: "Summarise the older history now", run: () => api(`/api/sessions/${app.id}/compact`, {}).then(() => toast("compaction requested", "info")) },
  { name: "model", args: "<model>", description: "Switch the model from the next request", run: (a) => (a ? setCall({ model: a }) : usage("/model <model>")) },
  { name: "effort", args: "<default|level the model takes>", description: "Switch the reasoning effort from the next request (the menu lists the model's)", run: (a) => (a ? setCall({ effort: a }) : usage("/effort <level>")) },
  { name: "permission", args: "<read-only|ask|workspace-write|danger-full-access>", description: "Switch the permission preset from the next step", run: (a) => (a ? setPermission(a) : usage("/permission <preset>")) },
  { name: "undo", args: "", description: "Revert the file changes write and edit made in the latest turn", run: () => undo() },
  { name: "fork", args: "", description: "New session with the history up to the last finished turn", run: () => fork(null) },
  { name: "rename", args: "<title>", description: "Rename the session", run: (a) => (a ? rename(a) : usage("/rename <title>")) },
  { name: "export", args: "", description: "Download the transcript as Markdown", run: () => { location.href = `/api/sessions/${app.id}/export?format=md`; } },
  { name: "usage", args: "", description: "Show or hide the usage panel", run: () => toggleUsage() },
];

function usage(text) {
  toast("usage: " + text);
  return Promise.reject(new Error(text));
}

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

// `kind` "error" (the default: API failures) or "info" (confirmations), styled apart.
function toast(text, kind = "error") {
  const t = $("toast");
  t.textContent = text;
  t.className = kind;
  t.setAttribute("role", kind === "error" ? "alert" : "status");
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

// The sidebar shows the first page of sessions at once and fetches later pages on demand: the
// "Older sessions…" button, clicked or scrolled into view (docs/web.md; the pages come from the
// session catalog, docs/sessions.md "Paged listing"). The server never sends the whole history.
const SESSION_PAGE = 100;

// The server's order: most recently updated first, then by id.
function newestFirst(a, b) {
  return b.updatedAt - a.updatedAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

// The sessions of a page, flat, in the server's order, each with its workspace.
function pageSessions(data) {
  return data.workspaces.flatMap((ws) => ws.sessions.map((s) => ({ ...s, cwd: ws.cwd }))).sort(newestFirst);
}

// Groups `app.sessions` by workspace (the workspace of the most recent session first), as the
// server groups a page, and draws the sidebar.
function showSessions() {
  const groups = new Map();
  for (const s of app.sessions) {
    if (!groups.has(s.cwd)) groups.set(s.cwd, { cwd: s.cwd, sessions: [] });
    groups.get(s.cwd).sessions.push(s);
  }
  app.workspaces = [...groups.values()];
  renderSessions();
}

// Fetches the first page again (a refresh). The older pages loaded stay listed after it: those
// of their sessions that still sort after the first page (one updated since is in the first page
// now, and only there).
async function loadSessions() {
  const run = ++app.sessionsRun;
  let data;
  try { data = await api(`/api/sessions?limit=${SESSION_PAGE}`); } catch { return; }
  if (run !== app.sessionsRun) return;
  let list = pageSessions(data);
  let next = data.next;
  if (app.olderPages && next && list.length) {
    const last = list[list.length - 1];
    const fresh = new Set(list.map((s) => s.id));
    list = list.concat(app.sessions.filter((s) => !fresh.has(s.id) && newestFirst(last, s) < 0));
    next = app.nextSessions;
  } else {
    app.olderPages = false;
  }
  app.sessions = list;
  app.nextSessions = next;
  showSessions();
}

async function moreSessions() {
  if (!app.nextSessions || app.loadingMore) return;
  app.loadingMore = true;
  const run = app.sessionsRun;
  let data;
  try {
    data = await api(`/api/sessions?limit=${SESSION_PAGE}&after=${encodeURIComponent(app.nextSessions)}`);
  } catch {
    return;
  } finally {
    app.loadingMore = false;
  }
  // A refresh began meanwhile and lists what it saw; the button asks for this page again.
  if (run !== app.sessionsRun) return;
  const known = new Set(app.sessions.map((s) => s.id));
  app.sessions.push(...pageSessions(data).filter((s) => !known.has(s.id)));
  app.nextSessions = data.next;
  app.olderPages = true;
  showSessions();
}

// Loads the next page when the "Older sessions…" button scrolls into view.
function watchMoreButton(button) {
  if (!("IntersectionObserver" in window)) return;
  if (!app.moreObserver) {
    app.moreObserver = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) moreSessions();
    });
  }
  app.moreObserver.disconnect();
  app.moreObserver.observe(button);
}

function renderSessions() {
  const nav = $("session-list");
  nav.replaceChildren();
  for (const ws of app.workspaces) {
    const group = nav.appendChild(el("section", "workspace"));
    const head = group.appendChild(el("div", "ws-head"));
    // The path box is right-to-left (the ellipsis eats the start); the marks keep the path's
    // own left-to-right order, leading `/` included.
    head.append(el("span", "ws-name", ws.cwd.split("/").filter(Boolean).pop() || "/"), el("span", "ws-path", "\u200e" + ws.cwd + "\u200e"));
    head.title = ws.cwd;
    const add = head.appendChild(el("button", "link", "+"));
    add.title = "New session in " + ws.cwd;
    add.addEventListener("click", () => createSession(ws.cwd));
    for (const s of ws.sessions) {
      app.cwds[s.id] = ws.cwd;
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
  if (!app.workspaces.length) nav.append(el("div", "empty", "No sessions yet."));
  renderStart();
  if (app.nextSessions) {
    const more = nav.appendChild(el("button", "link more-sessions", "Older sessions…"));
    more.addEventListener("click", () => moreSessions());
    watchMoreButton(more);
  }
}

// The start panel (no session selected): a prompt box that starts a session in the default
// directory, and that directory's recent sessions.
function renderStart() {
  const cwd = app.info?.defaultCwd || "";
  $("start-cwd").textContent = "in \u200e" + cwd;
  const here = ((app.workspaces || []).find((ws) => ws.cwd === cwd)?.sessions || []).slice(0, 10);
  const box = $("start-recent");
  box.replaceChildren(...here.map((s) => {
    const row = el("a", "start-session");
    row.href = "#/s/" + s.id;
    row.append(el("span", "s-title", s.title || "untitled"), el("span", "s-meta", `${ago(s.updatedAt)} · ${s.turns} turns · ${fmt.cost(s.costUsd)}`));
    return row;
  }));
  if (!here.length) box.append(el("div", "empty", "No sessions in this directory yet."));
}

async function startFromPanel() {
  const text = $("start-input").value;
  if (!text.trim()) return;
  const data = await api("/api/sessions", { cwd: app.info?.defaultCwd, prompt: text });
  $("start-input").value = "";
  location.hash = "#/s/" + data.id;
  loadSessions();
}

// The effort menu offers what the model takes (from /api/info's model table), plus "default".
function fillEfforts(model, current) {
  const known = app.info?.modelEfforts?.[model];
  const efforts = known ? known.efforts : (app.info?.efforts || []);
  const label = known?.default ? `default (${known.default})` : "default";
  const options = [Object.assign(el("option", null, label), { value: "default" }), ...efforts.map((e) => Object.assign(el("option", null, e), { value: e }))];
  $("effort").replaceChildren(...options);
  $("effort").value = current && efforts.includes(current) ? current : "default";
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
  app.commands = [];
  $("goal-bar").hidden = true;
  app.permissionPending = null;
  $("slash-menu").hidden = true;
  document.querySelectorAll(".session.selected").forEach((n) => n.classList.remove("selected"));
  document.querySelector(`.session[href="#/s/${CSS.escape(id)}"]`)?.classList.add("selected");
  app.conv.reset();
  $("start-panel").hidden = true;
  $("conversation").hidden = false;
  $("session-head").hidden = false;
  $("composer").hidden = false;
  $("export-md").href = `/api/sessions/${id}/export?format=md`;
  $("export-jsonl").href = `/api/sessions/${id}/export?format=jsonl`;
  refreshDetail().then(() => checkTrust(app.detail?.cwd || app.cwds[id], id));
  // EventSource reconnects by itself with Last-Event-ID, so the stream resumes where it was.
  const source = new EventSource(`/api/sessions/${encodeURIComponent(id)}/events`);
  app.source = source;
  let batch = [];
  // The view events of a session event come just before it (named `view`, docs/web.md,
  // "Events"): they are drawn with it, so a replayed event is skipped with its views.
  let views = [];
  source.addEventListener("view", (message) => {
    try { views.push(JSON.parse(message.data)); } catch { /* skipped */ }
  });
  source.onmessage = (message) => {
    let ev;
    try { ev = JSON.parse(message.data); } catch { views = []; return; }
    ev.view = views;
    views = [];
    batch.push(ev);
    if (batch.length === 1) queueMicrotask(() => flushEvents(batch.splice(0)));
  };
  // Children's events (docs/web.md, "Children"): named `child`, drawn under their parent.
  source.addEventListener("child", (message) => {
    let data;
    try { data = JSON.parse(message.data); } catch { return; }
    app.children.live(data);
  });
  app.children.reset();
  app.children.load();
  // Views of an event the broken connection did not deliver come again with it.
  source.onerror = () => { views = []; $("status").textContent = "reconnecting…"; };
  source.onopen = () => updateState();
}

function flushEvents(events) {
  const box = $("conversation");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  let listChanged = false;
  let childrenChanged = false;
  for (const ev of events) {
    app.conv.apply(ev);
    if (ev.type === "turn/end" || ev.type === "turn/start" || ev.type === "session/title") listChanged = true;
    if (ev.type === "tool/result" && (ev.data?.meta?.childId || ev.data?.meta?.agent)) childrenChanged = true;
  }
  app.children.placeAll();
  if (childrenChanged) { clearTimeout(flushEvents.childTimer); flushEvents.childTimer = setTimeout(() => app.children.load(), 200); }
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
    fillEfforts(d.model, d.effort);
  }
  app.detail = d;
  showImageInput();
  updateState();
  // The session's own commands (user-invocable skills) come from its live agent.
  try {
    const c = await api(`/api/sessions/${id}/commands`);
    if (id === app.id) app.commands = c.commands || [];
  } catch { /* shown as a toast */ }
}

function updateState() {
  const c = app.conv;
  $("title").textContent = c.title || "untitled";
  // What the session last used, from its log (a stored session too): model, effort, preset.
  const model = c.model || app.detail?.model;
  const effort = c.effort || app.detail?.effort || "default effort";
  const preset = c.permission || app.detail?.permission;
  $("session-meta").textContent = [model, model && effort, preset].filter(Boolean).join(" · ");
  document.title = (c.title || "dsh") + " · dsh";
  $("state").textContent = c.running ? "running" : app.detail?.live ? "idle" : "stored (read-only until you send)";
  $("state").className = "badge " + (c.running ? "running" : "");
  // The preset shown is the last `permission/preset` event's (a switch in flight shows its
  // target until its event arrives).
  const perm = c.permission || app.detail?.permission || "";
  if (app.permissionPending === perm) app.permissionPending = null;
  $("permission").value = app.permissionPending || perm;
  $("permission").classList.toggle("danger", (app.permissionPending || perm) === "danger-full-access");
  $("sandbox").hidden = !c.sandbox?.mode;
  $("sandbox").textContent = "sandbox " + (c.sandbox?.mode || "");
  $("sandbox").title = c.sandbox?.detail || "How bash commands are confined";
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
  cell("requests", String(perRequest.reduce((n, r) => n + (r.calls ?? 1), 0)));
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

// Images attached to the next message (docs/web.md, "Images"): pasted, dropped or picked.
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const MAX_IMAGE_BYTES = 20 * 1024 * 1024;
const MAX_IMAGES = 20;
app.images = [];

// The image button only for a model that takes images (the session's `images`; unknown for a
// stored session until it opens, which the server refuses then if need be).
function showImageInput() {
  $("attach").hidden = app.detail?.images === false;
}

function attachFiles(files) {
  if (app.detail?.images === false && files.length) {
    toast(`${app.detail.model || "the session's model"} takes no images; switch to a model that does`);
    return;
  }
  for (const file of files) {
    if (!IMAGE_TYPES.includes(file.type)) { toast(`${file.name || "file"}: not a PNG, JPEG, GIF or WebP image`); continue; }
    if (file.size > MAX_IMAGE_BYTES) { toast(`${file.name || "image"}: ${file.size} bytes, over the 20 MB image limit`); continue; }
    if (app.images.length >= MAX_IMAGES) { toast(`a message takes at most ${MAX_IMAGES} images`); break; }
    const image = { name: file.name || "pasted image", mediaType: file.type, url: URL.createObjectURL(file), data: null };
    app.images.push(image);
    image.ready = new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => { image.data = String(reader.result).replace(/^data:[^,]*,/, ""); resolve(); };
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  box.hidden = app.images.length === 0;
  app.images.forEach((image, i) => {
    const thumb = box.appendChild(el("span", "thumb"));
    const img = thumb.appendChild(document.createElement("img"));
    img.src = image.url;
    img.alt = image.name;
    const remove = thumb.appendChild(el("button", null, "×"));
    remove.type = "button";
    remove.title = `Remove ${image.name}`;
    remove.addEventListener("click", () => { URL.revokeObjectURL(image.url); app.images.splice(i, 1); renderAttachments(); });
    thumb.append(el("span", "name", image.name));
  });
}

function clearAttachments() {
  for (const image of app.images) URL.revokeObjectURL(image.url);
  app.images = [];
  renderAttachments();
}

async function sendPrompt(text, mode) {
  const images = app.images.slice();
  await Promise.all(images.map((i) => i.ready));
  const body = { text, mode };
  if (images.length) body.images = images.map((i) => ({ mediaType: i.mediaType, data: i.data, name: i.name }));
  const result = await api(`/api/sessions/${app.id}/prompt`, body);
  clearAttachments();
  return result;
}

// The first text of a message in a live, idle session opens the provider connection ahead of
// the send (docs/web.md, "Connection warm-up"). Quiet: a failure here costs nothing.
// `beforeinput` reads the box before each edit, so a box the page emptied itself (after a send)
// counts as empty.
let inputWasEmpty = true;
function warmOnFirstInput() {
  if (inputWasEmpty && $("input").value !== "" && app.id && app.detail?.live && !app.conv?.running) {
    fetch(`/api/sessions/${app.id}/warm`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" })
      .catch(() => {});
  }
}

function send(mode) {
  const input = $("input");
  const text = input.value;
  if ((!text.trim() && !app.images.length) || !app.id) return;
  // `/name args` runs a command; a message that starts with a space is sent as it is.
  const slash = app.images.length ? null : /^\/([\w.:-]+)(?:\s+([\s\S]*))?$/.exec(text.trimEnd());
  const sent = slash ? runCommand(slash[1], (slash[2] || "").trim())
    : sendPrompt(text, mode);
  Promise.resolve(sent).then(() => {
    input.value = "";
    $("slash-menu").hidden = true;
    if (!app.detail?.live) refreshDetail();
  }, () => {});
}

function runCommand(name, args) {
  const builtin = BUILTINS.find((b) => b.name === name);
  if (builtin) return Promise.resolve(builtin.run(args));
  return api(`/api/sessions/${app.id}/commands`, { name, arguments: args })
    .then((r) => { if (r?.notes?.length) toast(r.notes.join("\n"), "info"); return r; });
}

// Commands matching what follows the `/` typed so far: the page's, then the session's.
function commandMatches(prefix) {
  const session = app.commands.filter((c) => !BUILTINS.some((b) => b.name === c.name))
    .map((c) => ({ name: c.name, args: c.hint || "", description: c.description }));
  return [...BUILTINS, ...session].filter((c) => c.name.startsWith(prefix));
}

function updateSlashMenu() {
  const menu = $("slash-menu");
  const m = /^\/([\w.:-]*)$/.exec($("input").value);
  const matches = m ? commandMatches(m[1]) : [];
  menu.hidden = !matches.length;
  menu.replaceChildren(...matches.map((c) => {
    const item = el("button", "slash-item");
    item.type = "button";
    item.dataset.name = c.name;
    item.append(el("span", "slash-name", "/" + c.name), el("span", "slash-args", c.args ? " " + c.args : ""),
      el("span", "slash-desc", c.description));
    item.addEventListener("click", () => completeCommand(c.name));
    return item;
  }));
}

function completeCommand(name) {
  const input = $("input");
  input.value = "/" + name + " ";
  $("slash-menu").hidden = true;
  input.focus();
}

function setCall(body) {
  return api(`/api/sessions/${app.id}/call`, body).then((r) => {
    $("model").value = r.model || "";
    fillEfforts(r.model, r.effort);
    if (app.detail) { app.detail.images = r.images; showImageInput(); }
    toast(`from the next request: ${r.model}, effort ${r.effort || "default"}` + (r.note ? ` (${r.note})` : ""), "info");
  });
}

async function setPermission(preset) {
  const current = app.conv.permission || app.detail?.permission;
  if (preset === current) { updateState(); return; }
  // A widening needs the user's yes here; the server refuses it without `confirm: true`.
  const breadth = { "read-only": 0, "ask": 1, "workspace-write": 2, "danger-full-access": 3 };
  const widens = (breadth[preset] ?? 4) > (breadth[current] ?? 0);
  const warning = preset === "danger-full-access"
    ? "danger-full-access runs the model's commands without a sandbox, with all your rights (every file, the network)."
    : preset === "ask"
      ? "ask lets the model's commands and edits change files in the workspace once you approved each of them."
      : `${preset} lets the model's commands and edits change files in the workspace without asking.`;
  if (widens && !window.confirm(`${warning} Switch this session from ${current} to ${preset}?`)) {
    updateState();
    return;
  }
  app.permissionPending = preset;
  try {
    await api(`/api/sessions/${app.id}/permission`, widens ? { preset, confirm: true } : { preset });
    if (!app.detail?.live) refreshDetail();
  } catch (err) {
    app.permissionPending = null;
    updateState();
    throw err;
  }
}

function rename(title) {
  return api(`/api/sessions/${app.id}/title`, { title });
}

function toggleUsage() {
  app.usageOpen = !app.usageOpen;
  $("usage").hidden = !app.usageOpen;
  if (app.usageOpen) renderUsage();
}

// `/undo` (docs/web.md, "Undo"): what was reverted, or why nothing was.
async function undo() {
  const data = await api(`/api/sessions/${app.id}/undo`, {});
  toast(data.message || "undone", "info");
}

async function fork(turn) {
  const data = await api(`/api/sessions/${app.id}/fork`, turn ? { atTurn: turn } : {});
  location.hash = "#/s/" + data.id;
  loadSessions();
}

// Workspace trust (docs/web.md, "Workspace trust"): a workspace's own settings that run
// commands or widen power apply only once the user trusted its files exactly as reviewed.
async function checkTrust(cwd, sessionId) {
  const card = $("trust-card");
  if (!cwd) { card.hidden = true; return; }
  let t;
  try { t = await (await fetch(`/api/trust?cwd=${encodeURIComponent(cwd)}`)).json(); } catch { return; }
  // A later selection won the race.
  if (sessionId !== undefined && sessionId !== app.id) return;
  const ignoredKey = `dsh-trust-ignored:${t.workspace}:${t.pin}`;
  if (!t.needsTrust || sessionStorage.getItem(ignoredKey)) { card.hidden = true; app.trust = null; return; }
  app.trust = { cwd, sessionId, pin: t.pin, ignoredKey, text: t.text };
  const names = (t.files || []).map((f) => f.file.split("/").slice(-2).join("/"));
  $("trust-summary").textContent = `This project has settings that run commands or widen what dsh may do (${names.join(", ")}); they are ignored until you trust ${t.workspace}.`
    + (t.changedSinceTrusted ? " They changed since you trusted this workspace." : "");
  const lines = [];
  for (const f of t.files || []) {
    lines.push(f.kind === "hooks" ? `${f.file} (hooks: commands run confined, as bash does):`
      : f.kind === "command" ? `${f.file} (slash command: typing it sends this text; nothing in it runs):`
      : `${f.file} would set:`);
    for (const line of f.lines) lines.push("  " + line);
  }
  if (t.env) lines.push("", t.env.note);
  $("trust-review").textContent = lines.join("\n");
  $("trust-review").hidden = true;
  $("trust-show").textContent = "Review";
  $("trust-accept").textContent = sessionId ? "Trust and reopen" : "Trust";
  card.hidden = false;
}

async function acceptTrust() {
  const t = app.trust;
  if (!t) return;
  if (!window.confirm("Trust this workspace and apply these settings? Its hooks and MCP servers will run unconfined.\n\n" + t.text)) return;
  await api("/api/trust", { cwd: t.cwd, pin: t.pin, confirm: true, session: t.sessionId || undefined });
  $("trust-card").hidden = true;
  app.trust = null;
  toast("workspace trusted", "info");
  if (t.sessionId && t.sessionId === app.id) { app.id = null; select(t.sessionId); }
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
    // Resolves true once the answer was taken, false when the user backed out.
    answer: (callId, body) => {
      if ("decline" in body) {
        const message = window.prompt("Tell the model why (optional):", "");
        if (message === null) return false;
        body = { decline: message };
      }
      return api(`/api/sessions/${app.id}/questions/${encodeURIComponent(callId)}`, body).then(() => true);
    },
    fork: (turn) => fork(turn).catch(() => {}),
  });
  app.children = new Children($("children-panel"), (callId) => app.conv.cards.get(callId)?.node || null, () => app.id);
  try { app.info = await api("/api/info"); } catch { return; }
  $("models").replaceChildren(...(app.info.models || []).map((m) => Object.assign(el("option"), { value: m })));
  $("new-cwd").value = app.info.defaultCwd;
  $("new-session").addEventListener("click", () => { $("new-form").hidden = false; $("new-cwd").focus(); checkTrust($("new-cwd").value); });
  $("new-cwd").addEventListener("change", () => checkTrust($("new-cwd").value));
  $("trust-show").addEventListener("click", () => {
    const review = $("trust-review");
    review.hidden = !review.hidden;
    $("trust-show").textContent = review.hidden ? "Review" : "Hide review";
  });
  $("trust-accept").addEventListener("click", () => acceptTrust().catch(() => {}));
  $("trust-ignore").addEventListener("click", () => {
    if (app.trust) sessionStorage.setItem(app.trust.ignoredKey, "1");
    $("trust-card").hidden = true;
  });
  $("start-form").addEventListener("submit", (e) => { e.preventDefault(); startFromPanel().catch(() => {}); });
  $("start-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); startFromPanel().catch(() => {}); }
  });
  $("model").addEventListener("change", () => fillEfforts($("model").value.trim(), $("effort").value));
  fillEfforts(app.info.models?.[0], null);
  $("new-cancel").addEventListener("click", () => { $("new-form").hidden = true; });
  $("new-form").addEventListener("submit", (e) => { e.preventDefault(); createSession($("new-cwd").value).catch(() => {}); });
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send("followup"); });
  $("attach").addEventListener("click", () => $("image-picker").click());
  $("image-picker").addEventListener("change", (e) => { attachFiles([...e.target.files]); e.target.value = ""; });
  $("input").addEventListener("paste", (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); attachFiles(files); }
  });
  $("composer").addEventListener("dragover", (e) => {
    if ([...(e.dataTransfer?.types || [])].includes("Files")) { e.preventDefault(); $("composer").classList.add("dropping"); }
  });
  $("composer").addEventListener("dragleave", () => $("composer").classList.remove("dropping"));
  $("composer").addEventListener("drop", (e) => {
    $("composer").classList.remove("dropping");
    const files = [...(e.dataTransfer?.files || [])];
    if (files.length) { e.preventDefault(); attachFiles(files); }
  });
  $("input").addEventListener("keydown", (e) => {
    const menu = $("slash-menu");
    if (!menu.hidden && (e.key === "Tab" || e.key === "Enter") && !e.shiftKey) {
      // Tab, or Enter on a partial name, completes the first match.
      const typed = $("input").value.slice(1);
      const first = menu.querySelector(".slash-item");
      const exact = commandMatches(typed).some((c) => c.name === typed);
      if (first && (e.key === "Tab" || !exact)) { e.preventDefault(); completeCommand(first.dataset.name); return; }
    }
    if (e.key === "Escape") menu.hidden = true;
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send("followup"); }
  });
  $("input").addEventListener("input", updateSlashMenu);
  $("input").addEventListener("beforeinput", () => { inputWasEmpty = $("input").value === ""; });
  $("input").addEventListener("input", warmOnFirstInput);
  $("permission").addEventListener("change", () => setPermission($("permission").value).catch(() => {}));
  $("steer").addEventListener("click", () => send("steer"));
  $("cancel").addEventListener("click", () => api(`/api/sessions/${app.id}/cancel`, { keepInbox: false }).catch(() => {}));
  $("apply-call").addEventListener("click", () => {
    setCall({ model: $("model").value, effort: $("effort").value }).catch(() => {});
  });
  $("compact").addEventListener("click", () => api(`/api/sessions/${app.id}/compact`, {}).catch(() => {}));
  $("fork").addEventListener("click", () => fork(null).catch(() => {}));
  $("toggle-usage").addEventListener("click", toggleUsage);
  $("title").addEventListener("click", () => {
    const title = window.prompt("Rename the session:", app.conv.title || "");
    if (title && title.trim()) rename(title).catch(() => {});
  });
  window.addEventListener("hashchange", route);
  await loadSessions();
  route();
  setInterval(loadSessions, 10000);
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", start);

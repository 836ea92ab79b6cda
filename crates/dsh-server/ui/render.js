// Renders a session from its events: the conversation (streamed text, reasoning, tool cards,
// approvals, questions, notices) and the usage figures. Everything shown is derived from the events, so
// replaying the same events (a reload, a second tab) gives the same view. Tool cards, approvals,
// questions and turn ends are drawn from the server's view events (docs/protocol.md, "View
// events"), which carry each card's state and the tool's own presentation; nothing here knows
// a tool by its name.
"use strict";

const el = Markdown.el;
// Button labels of the approval choices the agent offers (`choices` of `approval/asked`).
const APPROVAL_LABELS = { allow_once: "Allow once", allow_session: "Allow for this session", allow_always: "Always allow", reject: "Reject" };

const fmt = {
  tokens: (n) => (n >= 1e6 ? (n / 1e6).toFixed(2) + "M" : n >= 1e4 ? Math.round(n / 1e3) + "k" : String(n || 0)),
  cost: (usd) => (usd == null ? "?" : usd < 0.01 ? "$" + usd.toFixed(4) : "$" + usd.toFixed(2)),
  pct: (r) => (r == null ? "–" : Math.round(r * 100) + "%"),
  time: (ms) => (ms ? new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : ""),
};

function parseArgs(text) {
  try { const v = JSON.parse(text || "{}"); return v && typeof v === "object" ? v : {}; } catch { return {}; }
}

function resultText(message) {
  const block = (message?.content || []).find((b) => b.type === "tool-result");
  return (block?.content || []).filter((b) => b.type === "text").map((b) => b.text).join("\n");
}

// The questions of `ask_user_question` arguments, with the ids the tool gives them.
function questionList(args) {
  const raw = Array.isArray(args.questions) ? args.questions : [];
  return raw.map((q, i) => (q && typeof q.question === "string" ? { q, i } : null)).filter(Boolean).map(({ q, i }) => ({
    id: typeof q.id === "string" && q.id.trim() ? q.id.trim() : `q${i + 1}`,
    question: q.question.trim(),
    header: typeof q.header === "string" ? q.header.trim() : "",
    multi: !!(q.multi_select ?? q.multiSelect),
    options: (Array.isArray(q.options) ? q.options : [])
      .map((o) => (typeof o === "string" ? { label: o } : o || {}))
      .filter((o) => typeof o.label === "string" && o.label.trim())
      .map((o) => ({ label: o.label.trim(), description: typeof o.description === "string" ? o.description.trim() : "" })),
  }));
}

// A plan as Markdown with its own heading levels (`# ` is an h1 here; chat replies start at h3).
function planMarkdown(source) {
  const box = el("div", "md plan-body");
  box.append(Markdown.render(source));
  for (const h of box.querySelectorAll("h3, h4, h5, h6")) {
    const up = el("h" + (Number(h.tagName[1]) - 2));
    up.append(...h.childNodes);
    h.replaceWith(up);
  }
  return box;
}

function messageText(message) {
  return (message?.content || []).filter((b) => b.type === "text").map((b) => b.text).join("\n");
}

// A collapsible block of preformatted output; long output shows its tail until opened.
function output(text, cls, tailLines = 30) {
  const lines = text.split("\n");
  if (lines.length <= tailLines) return el("pre", "out " + (cls || ""), text);
  const box = el("details", "out-box");
  box.append(el("summary", null, `${lines.length} lines (showing the last ${tailLines}; open for all)`));
  const tail = el("pre", "out " + (cls || ""), lines.slice(-tailLines).join("\n"));
  const full = el("pre", "out " + (cls || ""), text);
  box.addEventListener("toggle", () => { tail.hidden = box.open; });
  box.append(full);
  const wrap = el("div");
  wrap.append(box, tail);
  return wrap;
}

// Line diff of two texts (LCS; falls back to old/new blocks for very large inputs).
function lineDiff(oldText, newText) {
  const a = (oldText || "").split("\n"), b = (newText || "").split("\n");
  if (a.length * b.length > 4e6) return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  const n = a.length, m = b.length;
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (j < m && (i === n || dp[i][j + 1] >= dp[i + 1][j])) out.push(["+", b[j++]]);
    else out.push(["-", a[i++]]);
  }
  // Keep 3 lines of context around changes.
  const keep = out.map((_, k) => out.slice(Math.max(0, k - 3), k + 4).some((d) => d[0] !== " "));
  const shown = [];
  out.forEach((d, k) => { if (keep[k]) shown.push(d); else if (shown.length && shown[shown.length - 1][0] !== "…") shown.push(["…", ""]); });
  return shown;
}

function diffView(lines) {
  const pre = el("pre", "diff");
  for (const [sign, text] of lines) {
    const cls = sign === "+" ? "add" : sign === "-" ? "del" : sign === "…" ? "gap" : "ctx";
    pre.append(el("span", cls, sign === "…" ? "…\n" : `${sign} ${text}\n`));
  }
  return pre;
}

function unifiedView(text) {
  return diffView(text.split("\n").filter((l) => !/^(---|\+\+\+) /.test(l) && l !== "")
    .map((l) => (l.startsWith("@@") ? ["…", ""] : [l[0] === "+" || l[0] === "-" ? l[0] : " ", l.slice(1)])));
}

class Conversation {
  constructor(root, hooks) {
    this.root = root;
    this.hooks = hooks; // {approve(id, decision), answer(callId, body), fork(turn)}
    this.reset();
  }

  reset() {
    this.root.replaceChildren();
    this.turn = null; // the current turn's element
    this.blocks = new Map(); // streaming block index -> {kind, node, text}
    this.stepBox = null;
    this.cards = new Map(); // call id -> card
    this.approvals = new Map(); // approval id -> element
    this.running = false;
    this.title = "";
    this.permission = null;
    this.sandbox = null;
    this.model = null;
    this.inbox = { "next-turn": [], "next-step": [] };
    // Every billed call (docs/sessions.md, "Cost"): {turn, step, model, usage, cache, purpose,
    // calls}; `calls` is how many requests the entry stands for (a child's runs, a tool's).
    this.requests = [];
    this.lastSeq = -1;
    this.route = null; // the last `modelChanged`'s provider/model
    this.pendingRender = new Set();
  }

  container() {
    if (!this.turn) this.turn = this.root.appendChild(el("div", "turn"));
    return this.turn;
  }

  notice(text, cls) {
    return this.container().appendChild(el("div", "notice " + (cls || ""), text));
  }

  // One session event and `ev.view`, the view events the server made of it (drawn first).
  apply(ev) {
    if (ev.seq <= this.lastSeq) return;
    this.lastSeq = ev.seq;
    for (const view of ev.view || []) {
      const handler = this.views[view.kind];
      if (handler) handler.call(this, view);
    }
    const d = ev.data || {};
    const handler = this.handlers[ev.type];
    if (handler) handler.call(this, d, ev);
  }

  // Streamed text is re-rendered at most once per frame.
  schedule(block) {
    this.pendingRender.add(block);
    if (this.pendingRender.size === 1) requestAnimationFrame(() => {
      for (const b of this.pendingRender) {
        if (b.kind === "text") b.node.replaceChildren(Markdown.render(b.text));
        else b.body.textContent = b.text;
      }
      this.pendingRender.clear();
    });
  }

  streamBlock(index, kind) {
    let block = this.blocks.get(index);
    if (block) return block;
    if (!this.stepBox) this.stepBox = this.container().appendChild(el("div", "assistant streaming"));
    if (kind === "reasoning") {
      const node = el("details", "reasoning");
      node.append(el("summary", null, "Reasoning…"));
      const body = node.appendChild(el("div", "reasoning-body"));
      block = { kind, node, body, text: "" };
    } else if (kind === "tool-call") {
      const node = el("div", "tool-card pending", "preparing a tool call…");
      block = { kind, node, text: "" };
    } else {
      block = { kind: "text", node: el("div", "md"), text: "" };
    }
    this.stepBox.append(block.node);
    this.blocks.set(index, block);
    return block;
  }

  assistantMessage(d) {
    const box = this.stepBox || this.container().appendChild(el("div", "assistant"));
    box.replaceChildren();
    box.classList.remove("streaming");
    for (const b of d.message?.content || []) {
      if (b.type === "text" && b.text.trim()) {
        const md = box.appendChild(el("div", "md"));
        md.append(Markdown.render(b.text));
      }
      else if (b.type === "reasoning" && b.text?.trim()) {
        const r = el("details", "reasoning");
        r.append(el("summary", null, `Reasoning (${b.text.length} chars)`), el("div", "reasoning-body", b.text));
        box.append(r);
      } else if (b.type === "tool-call") box.append(this.card(b.id, b.name, b.arguments));
      // The card's presentation and state follow in its `toolCard` view event.
    }
    if (d.interrupted) box.append(el("div", "notice warn", "interrupted: the reply was cut off by a cancel"));
    if (d.usage) this.requests.push({ turn: d.turn, step: d.step, model: d.message?.source?.model || this.model, usage: d.usage, cache: null, purpose: "reply", calls: 1 });
    this.blocks.clear();
    this.pendingRender.clear();
    this.stepBox = null;
  }

  card(id, name, args, presentation) {
    let card = this.cards.get(id);
    // Providers may reuse call ids in later turns: a finished card is not reused.
    if (card && !card.done) {
      if (presentation) this.present(card, presentation);
      return card.node;
    }
    // Until its `toolCard` says how the tool shows the call (a shell drawn from the reply).
    const node = el("div", "tool-card");
    const head = node.appendChild(el("div", "tool-head"));
    const title = head.appendChild(el("span", "tool-name", name));
    const what = head.appendChild(el("code", "tool-what"));
    const status = head.appendChild(el("span", "tool-status", "…"));
    const body = node.appendChild(el("div", "tool-body"));
    card = { node, name, args: parseArgs(args), raw: args || "", title, what, status, body, view: "text" };
    this.present(card, presentation || { title: name });
    this.cards.set(id, card);
    return node;
  }

  // How the tool shows the call, as its `toolCard` carries it (docs/tools.md, "Presentation"):
  // title, subject (else the arguments), tooltip, kind, and the view that lays out its result.
  // Nothing here knows tool names.
  present(card, p) {
    card.view = p.view || "text";
    card.title.textContent = p.title || card.name;
    card.what.textContent = p.subject != null ? p.subject
      : card.view === "todos" ? `${(card.args.todos || []).length} items`
      : card.raw.slice(0, 200);
    if (p.detail) card.node.title = p.detail;
    else card.node.removeAttribute("title");
    card.node.dataset.kind = p.kind || "other";
  }

  // The questions of an `ask_user_question` call as a form: options as radio buttons (or
  // checkboxes when several may be chosen), a free-text "Other", Answer and Decline.
  questionForm(callId, args) {
    const card = this.cards.get(callId);
    if (!card || card.done) return;
    const questions = questionList(args && typeof args === "object" ? args : parseArgs(args));
    const form = el("form", "question");
    form.dataset.callId = callId;
    const fields = questions.map((q) => {
      const box = form.appendChild(el("fieldset", "q"));
      box.dataset.qid = q.id;
      if (q.header) box.append(el("legend", "q-header", q.header));
      box.append(el("div", "q-text", q.question));
      const type = q.multi ? "checkbox" : "radio";
      const name = `${callId}/${q.id}`;
      const choices = q.options.map((o) => {
        const row = box.appendChild(el("label", "q-option"));
        const input = el("input");
        input.type = type;
        input.name = name;
        input.value = o.label;
        row.append(input, el("span", "q-label", o.label));
        if (o.description) row.append(el("span", "q-desc", o.description));
        return input;
      });
      const row = box.appendChild(el("label", "q-option q-other"));
      let otherChoice = null;
      if (q.options.length) {
        otherChoice = el("input");
        otherChoice.type = type;
        otherChoice.name = name;
        row.append(otherChoice, el("span", "q-label", "Other:"));
      }
      const text = el("input", "q-free");
      text.type = "text";
      text.placeholder = q.options.length ? "another answer" : "your answer";
      text.addEventListener("input", () => { if (otherChoice && text.value.trim()) otherChoice.checked = true; });
      row.append(text);
      return { q, choices, otherChoice, text };
    });
    const buttons = form.appendChild(el("div", "approval-buttons"));
    const submit = buttons.appendChild(el("button", "primary", "Answer"));
    submit.type = "submit";
    const decline = buttons.appendChild(el("button", null, "Decline"));
    decline.type = "button";
    const send = (body) => {
      submit.disabled = decline.disabled = true;
      Promise.resolve(this.hooks.answer(callId, body)).then((sent) => {
        if (!sent) submit.disabled = decline.disabled = false;
      }, () => { submit.disabled = decline.disabled = false; });
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const answers = fields.map(({ q, choices, otherChoice, text }) => {
        const picked = choices.filter((c) => c.checked).map((c) => c.value);
        const typed = text.value.trim();
        if (typed && (!otherChoice || otherChoice.checked)) picked.push(typed);
        return { id: q.id, answers: picked };
      });
      send({ answers });
    });
    decline.addEventListener("click", () => send({ decline: null }));
    card.body.replaceChildren(form);
    card.node.classList.add("asking");
  }

  // The review of an `exit_plan_mode` call (docs/web.md, "Plan mode"): the plan rendered as
  // Markdown and three ways to answer the two review questions (`plan-review`, `plan-edits`,
  // docs/tools.md, "exit_plan_mode"): Approve; Approve with edits, in an editor prefilled with
  // the plan (the edited text is what the tool logs and the model carries out); Reject with
  // feedback, which keeps the session in plan mode.
  planReview(callId, args) {
    const card = this.cards.get(callId);
    if (!card || card.done) return;
    const plan = String((args && typeof args === "object" ? args : parseArgs(args)).plan || "").trim();
    const box = el("section", "plan-review");
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", "Approve this plan and leave plan mode?");
    box.dataset.callId = callId;
    box.append(el("div", "plan-label", "Plan review"));
    const body = box.appendChild(planMarkdown(plan));
    const editor = el("textarea", "plan-editor");
    editor.rows = Math.min(24, Math.max(6, plan.split("\n").length + 1));
    editor.spellcheck = false;
    editor.setAttribute("aria-label", "Edited plan");
    editor.hidden = true;
    const feedback = el("textarea", "plan-feedback");
    feedback.rows = 3;
    feedback.placeholder = "What should change? The agent revises the plan and presents it again.";
    feedback.setAttribute("aria-label", "Feedback on the plan");
    feedback.hidden = true;
    const status = el("div", "plan-status");
    status.setAttribute("role", "status");
    box.append(editor, feedback, status);
    const buttons = box.appendChild(el("div", "approval-buttons plan-buttons"));
    const button = (label, cls) => {
      const b = buttons.appendChild(el("button", cls, label));
      b.type = "button";
      return b;
    };
    const approve = button("Approve", "primary plan-approve");
    const edit = button("Approve with edits", "plan-edit");
    const reject = button("Reject with feedback", "plan-reject");
    const confirm = button("", "primary plan-confirm");
    const back = button("Back", "plan-back");
    confirm.hidden = back.hidden = true;
    let mode = "review";
    const show = (next) => {
      mode = next;
      const reviewing = next === "review";
      approve.hidden = edit.hidden = reject.hidden = !reviewing;
      confirm.hidden = back.hidden = reviewing;
      editor.hidden = next !== "edit";
      feedback.hidden = next !== "reject";
      body.hidden = next === "edit";
      confirm.textContent = next === "edit" ? "Approve edited plan" : "Send feedback";
      status.textContent = "";
      if (next === "edit") { if (!editor.value) editor.value = plan; editor.focus(); }
      if (next === "reject") feedback.focus();
    };
    const send = (review, extra) => {
      for (const b of buttons.querySelectorAll("button")) b.disabled = true;
      const answers = [{ id: "plan-review", answers: [review] }];
      if (extra) answers.push({ id: "plan-edits", answers: [extra] });
      const unlock = () => { for (const b of buttons.querySelectorAll("button")) b.disabled = false; };
      Promise.resolve(this.hooks.answer(callId, { answers })).then((sent) => {
        if (sent) status.textContent = "sent; waiting for the agent";
        else unlock();
      }, (err) => { unlock(); status.textContent = "not sent: " + (err?.message || err || "error"); });
    };
    approve.addEventListener("click", () => send("Approve"));
    edit.addEventListener("click", () => show("edit"));
    reject.addEventListener("click", () => show("reject"));
    back.addEventListener("click", () => show("review"));
    confirm.addEventListener("click", () => {
      if (mode === "edit") {
        const edited = editor.value.trim();
        if (!/^#{1,6} \S/.test(edited)) { status.textContent = "The plan must start with a `# ` heading that names it."; return; }
        // An unchanged plan is a plain approval.
        send("Approve", edited === plan ? "" : edited);
      } else {
        const text = feedback.value.trim();
        if (!text) { status.textContent = "Say what should change."; return; }
        send("Keep planning", text);
      }
    });
    card.body.replaceChildren(box);
    card.node.classList.add("asking");
  }

  // The outcome of a plan review: the plan that was approved (the user's edit, when there was
  // one) or the feedback that sent the agent back to planning.
  planResult(card, c, text, summary) {
    const meta = c.meta || {};
    const md = planMarkdown;
    const box = card.body.appendChild(el("section", "plan-review decided"));
    if (c.errorCode) {
      // Feedback (the tool summarises it as kept planning) is no failure; a dismissal is.
      const kept = !!summary && summary.tone !== "failure";
      card.status.textContent = summary?.text || c.errorCode;
      card.node.classList.add(kept ? "ok" : c.state);
      box.append(el("div", "plan-label", kept ? "Rejected: back to planning" : "Not approved"), output(text, kept ? "" : "err"));
      const presented = typeof card.args.plan === "string" ? card.args.plan : "";
      if (presented) { const more = box.appendChild(el("details")); more.append(el("summary", null, "the plan"), md(presented)); }
      return;
    }
    const decision = meta.decision || "";
    card.status.textContent = summary?.text || "done";
    card.node.classList.add("ok");
    box.append(el("div", "plan-label", decision === "approved-with-edits" ? "Approved with your edits" : decision === "unreviewed" ? "Plan (not reviewed)" : "Approved plan"));
    box.append(md(String(meta.plan || card.args.plan || "")));
  }

  // Usage a record carries besides replies: a tool's own calls (`auxiliaryUsage`) and a child's
  // runs (`childId` with `usageByModel`, else `usage` under `model`), as the server sums them.
  billedBy(turn, step, record) {
    const aux = record.auxiliaryUsage;
    if (aux?.usage) this.requests.push({ turn, step, model: aux.model, usage: aux.usage, cache: null, purpose: "tool", calls: aux.usage.requests || 0 });
    if (typeof record.childId !== "string") return;
    const byModel = record.usageByModel || (record.usage ? { [record.model || this.model]: record.usage } : {});
    for (const [model, usage] of Object.entries(byModel)) {
      this.requests.push({ turn, step, model, usage, cache: null, purpose: "subagent", calls: usage.requests || 0 });
    }
  }

  // A `toolCard` view event: the card appears, or changes state (the whole card each time).
  toolCard(c) {
    let card = this.cards.get(c.callId);
    if (!card || card.done) {
      this.container().append(this.card(c.callId, c.tool, c.arguments, c.presentation));
      card = this.cards.get(c.callId);
    }
    card.args = parseArgs(c.arguments);
    card.raw = c.arguments || "";
    this.present(card, c.presentation || {});
    card.node.dataset.state = c.state;
    card.node.classList.remove(...CARD_CLASSES);
    const waiting = { question: "waiting for your answer", "plan-review": "waiting for your review" }[card.view];
    if (c.state === "awaitingApproval") {
      card.node.classList.add("awaiting");
      card.status.textContent = "awaiting approval";
    } else if (c.state === "running") {
      card.node.classList.add(waiting ? "asking" : "running");
      card.status.textContent = waiting || (c.progress ? progressText(c.progress) : "running…");
    } else if (c.state === "pending") {
      card.status.textContent = "pending";
    } else this.finished(card, c);
  }

  // A card whose call ended: its status, and its result as the tool's view lays it out.
  finished(card, c) {
    const text = c.result || "";
    const meta = c.meta || {};
    // The tool's summary of the result ("exit 1", "3 matches"), as the server sends it.
    const summary = c.summary || null;
    // A question that got no answer (the process stopped, the turn was cancelled) is closed.
    for (const box of this.approvals.values()) {
      if (box.dataset.callId === c.callId && !box.classList.contains("decided")) {
        box.classList.add("decided");
        box.querySelector(".approval-buttons")?.replaceChildren(el("span", null, "no longer waiting"));
      }
    }
    card.done = true;
    card.body.replaceChildren();
    if (card.view === "plan-review" && c.state !== "cancelled") { this.planResult(card, c, text, summary); return; }
    if (c.state !== "done") {
      // failed, denied (the user, a policy, a hook or the preset) or cancelled: each its own.
      card.node.classList.add(c.state);
      card.status.textContent = summary?.text || (c.state === "failed" ? c.errorCode || "failed" : c.state);
      if (text) card.body.append(output(text, "err"));
      return;
    }
    card.status.textContent = summary?.text || { contents: "read", todos: "updated" }[card.view] || "done";
    card.node.classList.add(summary?.tone === "failure" ? "failed" : "ok");
    (RESULT_VIEWS[card.view] || RESULT_VIEWS.text)(card, text, meta);
  }
}

// How each view (the tool's `presentation.view`) lays out a result.
const RESULT_VIEWS = {
  question: (card, text) => card.body.append(el("pre", "out answers", text)),
  terminal: (card, text) => card.body.append(output(text, "term")),
  diff: (card, text, meta) => {
    if (meta.unifiedDiff) card.body.append(unifiedView(meta.unifiedDiff));
    else for (const f of meta.diffs || []) if (f.newText != null) card.body.append(el("div", "diff-path", f.path || ""), diffView(lineDiff(f.oldText || "", f.newText)));
    if (!card.body.childNodes.length) card.body.append(el("div", "summary", text));
  },
  contents: (card, text) => folded(card, "contents", text),
  results: (card, text) => folded(card, "results", text),
  // The sources from meta.sources (docs/tools.md, "web_search"); only http(s) links.
  sources: (card, text, meta) => {
    const ol = card.body.appendChild(el("ol", "sources"));
    for (const src of Array.isArray(meta.sources) ? meta.sources : []) {
      const url = String(src.url || "");
      const li = ol.appendChild(el("li"));
      if (/^https?:\/\//i.test(url)) {
        const link = li.appendChild(el("a", null, src.title || url));
        link.href = url;
        link.target = "_blank";
        link.rel = "noopener noreferrer";
      } else li.append(el("span", null, src.title || url));
      if (src.publishedAt) li.append(el("span", "summary", " " + src.publishedAt));
    }
  },
  todos: (card) => {
    const ul = card.body.appendChild(el("ul", "todos"));
    for (const t of card.args.todos || []) ul.append(el("li", t.status, t.content));
  },
  text: (card, text) => card.body.append(output(text, "")),
};

// A result folded away behind `label`.
function folded(card, label, text) {
  card.node.classList.add("quiet");
  const box = card.body.appendChild(el("details"));
  box.append(el("summary", null, label), el("pre", "out", text));
}

// The classes a card's state sets (all removed when it changes).
// A long call's progress as its tool reported it (an MCP server's `notifications/progress`):
// `2/4 (50%) copying`, or the count and message without a total.
function progressText(p) {
  let text = p.total > 0 ? `${p.progress}/${p.total} (${Math.min(100, Math.round((p.progress / p.total) * 100))}%)` : `${p.progress}`;
  if (p.message) text += ` ${p.message}`;
  return text;
}

const CARD_CLASSES = ["running", "awaiting", "asking", "ok", "failed", "denied", "cancelled", "quiet"];

// Turn ends as every front end classifies them (`turnEnded.state`, docs/protocol.md).
function turnEndText(v) {
  if (v.state === "completed") return "completed";
  if (v.state === "cancelled") return v.reason === "interrupted" ? "cancelled (the process stopped)" : "cancelled";
  return `failed (${v.reason})` + (v.message ? `: ${v.code ? v.code + " " : ""}${v.message}` : "");
}

// View events (docs/protocol.md, "View events"); kinds not listed are skipped.
Conversation.prototype.views = {
  // The session's goal (docs/goals.md): a bar above the conversation, hidden once cleared.
  goal(v) {
    const bar = document.getElementById("goal-bar");
    if (!bar) return;
    const g = v.goal;
    bar.hidden = !g;
    if (!g) return;
    bar.className = `goal-${g.phase}`;
    const phase = el("span", "goal-phase", g.phase);
    const rounds = el("span", "goal-rounds", `round ${g.roundsStarted}/${g.maxGoalRounds}`);
    const objective = el("span", "goal-objective", g.objective);
    const parts = [el("strong", null, "Goal"), phase, objective, rounds];
    if (g.blockedReason) parts.push(el("span", "goal-blocked", g.blockedReason));
    bar.replaceChildren(...parts);
    bar.title = "/goal pause, /goal resume, /goal clear, /goal edit <objective>";
  },
  turnStarted(v) {
    this.turn = this.root.appendChild(el("div", "turn"));
    this.turn.dataset.turn = v.turn;
    this.running = true;
  },
  turnEnded(v) {
    this.running = false;
    // The logged reason stays a class (`aborted`, `max-tokens`) next to the state.
    const foot = this.container().appendChild(el("div", `turn-end ${v.reason} ${v.state}`));
    foot.append(el("span", null, `turn ${v.turn} · ${turnEndText(v)}`));
    const fork = foot.appendChild(el("button", "link", "fork here"));
    fork.title = "New session with the history up to the end of this turn";
    fork.addEventListener("click", () => this.hooks.fork(v.turn));
    this.stepBox = null;
    this.blocks.clear();
    this.turn = null;
  },
  toolCard(v) { this.toolCard(v); },
  // `/undo` reverted a turn's file changes (live, after a reload and after a resume alike).
  filesUndone(v) {
    const files = (Array.isArray(v.files) ? v.files : []).map((f) => `${f.path} (${f.action})`).join(", ");
    this.notice(`undo: turn ${v.turn}'s file changes reverted: ${files}` + (v.complete ? "" : " (not all files could be restored)"), v.complete ? "info" : "warn");
  },
  // A switch of model (`/model`, a fallback), shown where it took effect; the first is the start.
  modelChanged(v) {
    if (this.route && this.route !== `${v.provider}/${v.model}`) this.notice(`model: ${v.model} (${v.provider}) from here`, "info");
    this.route = `${v.provider}/${v.model}`;
  },
  questionAsked(v) {
    if (v.form === "planReview") this.planReview(v.callId, v.arguments);
    else this.questionForm(v.callId, v.arguments);
  },
  approvalRequested(v) {
    const card = this.cards.get(v.callId);
    const box = this.container().appendChild(el("div", "approval"));
    box.append(el("div", "approval-q", `Allow ${card?.title.textContent || "this call"}${v.escalation ? " with " + v.escalation : ""}?`), el("div", "approval-why", v.reason || ""));
    if (card) box.append(el("code", "tool-what", card.what.textContent || ""));
    // One button per offered choice; "for this session" and "always" remember `v.rule`.
    const choices = Array.isArray(v.choices) && v.choices.length ? v.choices : ["allow_once", "reject"];
    if (v.rule && choices.some((c) => c === "allow_session" || c === "allow_always")) {
      box.append(el("div", "approval-why approval-rule", `"This session" / "Always" would allow ${v.rule}`));
    }
    const buttons = box.appendChild(el("div", "approval-buttons"));
    for (const choice of choices) {
      const label = APPROVAL_LABELS[choice];
      if (!label) continue;
      const button = buttons.appendChild(el("button", choice === "allow_once" ? "primary" : null, label));
      button.dataset.choice = choice;
      button.addEventListener("click", () => this.hooks.approve(v.id, choice === "allow_once" ? "allow" : choice));
    }
    box.dataset.callId = v.callId;
    this.approvals.set(v.id, box);
  },
  approvalDecided(v) {
    // A remembered rule answered: the notice comes from the logged event, which names the rule.
    if (v.scope === "rule") return;
    const box = this.approvals.get(v.id);
    if (!box) return;
    box.classList.add("decided");
    const allowed = { once: "allowed once", session: "allowed for this session", always: "always allowed" };
    box.querySelector(".approval-buttons")?.replaceChildren(el("span", null, v.outcome === "approved" ? allowed[v.scope] || "allowed" : v.outcome));
  },
};

Conversation.prototype.handlers = {
  "user/message"(d, ev) {
    const src = d.source || {};
    if (src.kind === "user") {
      const msg = this.container().appendChild(el("div", "user"));
      msg.append(Markdown.render(messageText(d)));
      // Images: thumbnails from the session's image folder (docs/web.md, "Images").
      const images = (d.content || []).filter((b) => b.type === "image" && b.attachment);
      if (images.length) {
        const row = msg.appendChild(el("div", "images"));
        for (const b of images) {
          const a = b.attachment;
          const hex = String(a.attachmentId || "").replace(/^sha256:/, "");
          const ext = { "image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp" }[a.mediaType] || "bin";
          const img = row.appendChild(document.createElement("img"));
          img.src = `/api/sessions/${encodeURIComponent((typeof app !== "undefined" && app.id) || "")}/images/${hex}.${ext}`;
          img.alt = `[image: ${a.name || "image"}${a.width ? ` ${a.width}x${a.height}` : ""}]`;
          img.title = img.alt;
        }
      }
    } else if (ev.surfaceOp && ev.surfaceOp.op === "replace") {
      const box = this.container().appendChild(el("details", "context compaction"));
      const md = el("div", "md");
      md.append(Markdown.render(messageText(d)));
      box.append(el("summary", null, "Compaction summary (replaces the earlier history for the model)"), md);
    } else {
      const box = this.container().appendChild(el("details", "context"));
      box.append(el("summary", null, `context: ${src.plugin || src.kind || "note"}${src.form ? " / " + src.form : ""}`), el("pre", "out", messageText(d)));
    }
  },
  "assistant/chunk"(d) {
    const c = d.chunk || {};
    if (c.type === "block-start") this.streamBlock(c.index, c.blockType);
    else if (c.type === "text-delta" || c.type === "reasoning-delta") {
      const b = this.streamBlock(c.index, c.type === "text-delta" ? "text" : "reasoning");
      b.text += c.text || "";
      this.schedule(b);
    } else if (c.type === "tool-call-delta") {
      const b = this.streamBlock(c.index, "tool-call");
      if (c.name) b.name = c.name;
      b.text += c.argumentsDelta || "";
      b.node.textContent = `${b.name || "tool"}: ${b.text.slice(-160)}`;
    }
  },
  "assistant/message"(d) { this.assistantMessage(d); },
  // The usage a tool's result carries (its own calls, a child's runs); the card is drawn from
  // the result's `toolCard`.
  "tool/result"(d) { if (d.meta) this.billedBy(d.turn, d.step, d.meta); },
  // Billed calls no reply carries: compaction, title, failed or cancelled replies.
  "usage/call"(d) {
    if (d.usage) this.requests.push({ turn: d.turn, step: d.step, model: d.model, usage: d.usage, cache: null, purpose: d.purpose, calls: 1 });
  },
  "subagent/usage"(d) { this.billedBy(null, null, d); },
  "llm/retry"(d) {
    if (this.stepBox) { this.stepBox.remove(); this.stepBox = null; this.blocks.clear(); }
    this.notice(`retry ${d.retry} in ${(d.delayMs / 1000).toFixed(1)} s: ${d.failure?.code || ""} ${d.failure?.message || ""}`, "warn");
  },
  "compaction/start"(d) { this.notice(`compacting (${d.trigger}): about ${fmt.tokens(d.estimatedTokens)} of ${fmt.tokens(d.contextWindow)} tokens in context`, "info"); },
  "compaction/end"(d) {
    this.notice(d.ok ? `compacted: ${d.pruned || 0} tool results pruned, ${d.summarizedMessages || 0} messages summarised; about ${fmt.tokens(d.tokensBefore)} → ${fmt.tokens(d.tokensAfter)} tokens`
      : `compaction failed, history kept: ${d.warning || ""}`, d.ok ? "info" : "warn");
  },
  "approval/decided"(d) {
    if (d.scope !== "rule") return;
    const card = this.cards.get(d.callId);
    this.notice(`${card?.title.textContent || "the call"} allowed without asking by a remembered approval: ${d.rule}`, "info");
  },
  "session/title"(d) { this.title = d.title; },
  "request/header"(d) {
    this.model = d.header?.config?.model || this.model;
    // The effort the request asked for; absent means the model's default.
    if (d.header?.config) this.effort = d.header.config.reasoningEffort || null;
  },
  "request/cache"(d) {
    const req = [...this.requests].reverse().find((r) => r.purpose === "reply" && r.turn === d.turn && r.step === d.step && !r.cache);
    if (req) req.cache = d;
  },
  "permission/preset"(d) { this.permission = d.preset; },
  "sandbox/mode"(d) { this.sandbox = d; },
  "agent/inbox/spliced"(d) {
    const list = this.inbox[d.target] || (this.inbox[d.target] = []);
    list.splice(d.start || 0, d.removedCount || 0, ...(d.inserted || []).map(messageText));
  },
  "session/end-seed"() { this.notice("forked: the history above was copied from the parent session", "info"); this.turn = null; },
};

// Usage figures of a session: totals and per-request cost, from the conversation's requests.
function usageSummary(requests, prices) {
  const total = { input: 0, cacheRead: 0, cacheWrite: 0, output: 0, reasoning: 0, cost: 0, unknownCost: false };
  const perRequest = requests.map((r) => {
    const u = r.usage || {};
    const p = prices?.[r.model];
    const cost = p ? ((u.inputTokens || 0) * p.inputPerMtok + (u.cacheReadTokens || 0) * p.cacheReadPerMtok
      + (u.cacheWriteTokens || 0) * p.cacheWritePerMtok + (u.outputTokens || 0) * p.outputPerMtok) / 1e6 : null;
    total.input += u.inputTokens || 0; total.cacheRead += u.cacheReadTokens || 0;
    total.cacheWrite += u.cacheWriteTokens || 0; total.output += u.outputTokens || 0; total.reasoning += u.reasoningTokens || 0;
    if (cost == null) total.unknownCost = true; else total.cost += cost;
    const billed = (u.inputTokens || 0) + (u.cacheReadTokens || 0) + (u.cacheWriteTokens || 0);
    return { ...r, cost, hit: r.cache?.cacheHitRatio ?? (billed ? (u.cacheReadTokens || 0) / billed : null) };
  });
  const billed = total.input + total.cacheRead + total.cacheWrite;
  total.hit = billed ? total.cacheRead / billed : null;
  return { total, perRequest };
}

// A small bar chart of cost per request (bar height) with the cache-hit share (bar shade).
function costChart(perRequest) {
  const NS = "http://www.w3.org/2000/svg";
  const w = 320, h = 80, n = Math.max(perRequest.length, 1), bw = Math.max(2, Math.min(24, w / n - 1));
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "chart");
  const max = Math.max(...perRequest.map((r) => r.cost || 0), 1e-9);
  perRequest.forEach((r, k) => {
    const bh = Math.max(1, ((r.cost || 0) / max) * (h - 4));
    const rect = document.createElementNS(NS, "rect");
    rect.setAttribute("x", k * (w / n));
    rect.setAttribute("y", h - bh);
    rect.setAttribute("width", bw);
    rect.setAttribute("height", bh);
    rect.setAttribute("class", r.hit == null ? "bar" : r.hit >= 0.8 ? "bar hot" : r.hit >= 0.4 ? "bar warm" : "bar cold");
    const title = document.createElementNS(NS, "title");
    const u = r.usage || {};
    title.textContent = `${r.purpose && r.purpose !== "reply" ? r.purpose + " · " : ""}turn ${r.turn ?? "-"} step ${r.step ?? "-"} · ${r.model || "?"}\ncost ${fmt.cost(r.cost)} · cache hit ${fmt.pct(r.hit)}\n` +
      `input ${u.inputTokens || 0} · cache read ${u.cacheReadTokens || 0} · output ${u.outputTokens || 0}` +
      (r.cache && r.cache.prefixExtension === false && r.cache.brokenAt ? `\nprefix broke at ${r.cache.brokenAt.part}${r.cache.brokenAt.index != null ? " " + r.cache.brokenAt.index : ""}` : "");
    rect.append(title);
    svg.append(rect);
  });
  return svg;
}

// A session's children (subagents), nested under it (docs/web.md, "Children"). Each child is
// one expandable box: name, label and state in its summary, its transcript inside, drawn by
// the same Conversation renderer as the session's. The box sits in the tool card of the
// parent's call that started the child, or in the children panel above the conversation
// while that card is not known. Live events come from the parent's stream (SSE events named
// `child`); the rest, and every finished child after a reload, from the children API.
"use strict";

// `state` of the children API: running, else how the last turn ended (docs/protocol.md, "Turn
// ends": completed, cancelled or failed).
const CHILD_STATES = { running: "running", completed: "done", failed: "failed", cancelled: "cancelled", idle: "idle" };

class Children {
  // `panel`: where children without a known card go; `cards(callId)`: the parent's card
  // element of a tool call, if drawn; `sessionId()`: the parent's id now.
  constructor(panel, cards, sessionId) {
    this.panel = panel;
    this.cards = cards;
    this.sessionId = sessionId;
    this.reset();
  }

  reset() {
    this.byId = new Map();
    this.panel.replaceChildren();
    this.panel.hidden = true;
  }

  // The listing of `GET /api/sessions/:id/children` (stored and running children).
  async load() {
    const id = this.sessionId();
    let data;
    try {
      const response = await fetch(`/api/sessions/${encodeURIComponent(id)}/children`);
      if (!response.ok) return;
      data = await response.json();
    } catch { return; }
    if (id !== this.sessionId()) return;
    for (const info of data.children || []) {
      const child = this.child(info);
      child.callId = child.callId || info.callId || null;
      // The server knows best whether a child still runs unless its events said so since.
      if (!child.live) this.setState(child, info.state);
    }
    this.placeAll();
  }

  child(info) {
    let child = this.byId.get(info.id);
    if (child) {
      if (info.name && !child.name) child.name = info.name;
      if (info.label && !child.label) child.label = info.label;
      this.summary(child);
      return child;
    }
    const node = el("details", "child");
    node.dataset.childId = info.id;
    const head = node.appendChild(el("summary", "child-head"));
    const body = node.appendChild(el("div", "child-transcript"));
    child = {
      id: info.id, name: info.name || "", label: info.label || "", model: info.model || "",
      callId: null, state: "idle", node, head, body, next: 0, buffer: new Map(),
      loaded: false, loading: null, tries: 0, live: false, placed: null,
    };
    // A child's transcript has no controls of its own: nothing to approve, answer or fork.
    child.conv = new Conversation(body, { approve() {}, answer: () => false, fork() {} });
    node.addEventListener("toggle", () => { if (node.open) this.fill(child); });
    this.byId.set(info.id, child);
    this.summary(child);
    return child;
  }

  summary(child) {
    child.node.dataset.state = child.state;
    child.head.replaceChildren(
      el("span", "child-name", child.name || child.id.slice(0, 8)),
      el("span", "child-label", child.label),
      el("span", "badge child-state " + child.state, CHILD_STATES[child.state] || child.state),
    );
    child.head.title = `subagent ${child.id}${child.model ? " · " + child.model : ""}`;
  }

  setState(child, state) {
    if (!state || state === child.state) return;
    child.state = state;
    this.summary(child);
  }

  // One SSE `child` event: `{child, callId, background, event, view}`.
  live(message) {
    const info = message.child || {};
    if (!info.id || !message.event) return;
    const child = this.child(info);
    child.live = true;
    if (!child.callId && message.callId) child.callId = message.callId;
    const ev = message.event;
    ev.view = message.view || [];
    for (const v of ev.view) {
      if (v.kind === "turnStarted") this.setState(child, "running");
      else if (v.kind === "turnEnded") this.setState(child, v.state);
    }
    this.take(child, ev);
    this.place(child);
  }

  // Events are drawn in seq order, each once: a later one waits for the missing ones, which
  // the child's log supplies.
  take(child, ev) {
    if (ev.seq < child.next) return;
    if (ev.seq > child.next) {
      child.buffer.set(ev.seq, ev);
      this.fill(child);
      return;
    }
    child.conv.apply(ev);
    child.next = ev.seq + 1;
    while (child.buffer.has(child.next)) {
      const queued = child.buffer.get(child.next);
      child.buffer.delete(child.next);
      child.conv.apply(queued);
      child.next = queued.seq + 1;
    }
  }

  // Reads the child's log once (and again while a gap stays open, up to a few times).
  fill(child) {
    if (child.loading || (child.loaded && !child.buffer.size)) return child.loading;
    const parent = this.sessionId();
    child.loading = (async () => {
      try {
        const response = await fetch(`/api/sessions/${encodeURIComponent(parent)}/children/${encodeURIComponent(child.id)}`);
        if (!response.ok || parent !== this.sessionId()) return;
        const data = await response.json();
        child.loaded = true;
        if (!child.live && data.child?.state) this.setState(child, data.child.state);
        (data.events || []).forEach((ev, i) => { ev.view = data.views?.[i] || []; this.take(child, ev); });
      } catch { /* a later event or toggle tries again */ } finally {
        child.loading = null;
      }
      if (!child.buffer.size) child.tries = 0;
      else {
        // Events newer than the log's flushed end: try again shortly, then draw what is here.
        if (++child.tries < 8) setTimeout(() => this.fill(child), 250);
        else {
          for (const seq of [...child.buffer.keys()].sort((a, b) => a - b)) {
            const ev = child.buffer.get(seq);
            child.buffer.delete(seq);
            child.conv.apply(ev);
            child.next = seq + 1;
          }
        }
      }
    })();
    return child.loading;
  }

  // Puts the child's box in its starting call's card, else in the panel.
  place(child) {
    const card = child.callId ? this.cards(child.callId) : null;
    const where = card ? (card.querySelector(":scope > .card-children") || card.appendChild(el("div", "card-children"))) : this.panel;
    if (child.placed !== where) {
      where.append(child.node);
      child.placed = where;
    }
    this.panel.hidden = !this.panel.childElementCount;
  }

  // After the parent's events were drawn: cards may have appeared (or been redrawn).
  placeAll() {
    for (const child of this.byId.values()) {
      if (child.placed && !child.placed.isConnected) child.placed = null;
      this.place(child);
    }
  }
}

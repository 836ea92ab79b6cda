// A small Markdown renderer for streamed model text: paragraphs, fenced code blocks, inline
// code, bold and italic, lists (nested by indentation), headings, block quotes, rules, and
// links shown as text. It builds DOM nodes with textContent only (never innerHTML), so model
// output cannot inject markup. Unclosed fences render as code, which suits streaming.
"use strict";

const Markdown = (() => {
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*\n]+)\*\*|__([^_\n]+)__|\*([^*\s][^*\n]*)\*|\b_([^_\n]+)_\b|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

  // Appends `text` with inline formatting to `parent`.
  function inline(parent, text) {
    let last = 0;
    // A regex of its own per call: the recursion for bold and italic must not move our cursor.
    const re = new RegExp(INLINE.source, "g");
    for (let m = re.exec(text); m; m = re.exec(text)) {
      if (m.index > last) parent.append(text.slice(last, m.index));
      if (m[1]) parent.append(el("code", null, m[2].replace(/^ (.*) $/, "$1")));
      else if (m[3] || m[4]) inline(parent.appendChild(el("strong")), m[3] || m[4]);
      else if (m[5] || m[6]) inline(parent.appendChild(el("em")), m[5] || m[6]);
      else if (m[7]) {
        const link = parent.appendChild(el("span", "md-link", m[7]));
        link.title = m[8];
        if (m[8] !== m[7]) parent.append(el("span", "md-url", ` (${m[8]})`));
      }
      last = re.lastIndex;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  const FENCE = /^(\s*)(`{3,}|~{3,})\s*([\w+.#-]*)/;
  const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^\s*>\s?(.*)$/;

  // Renders lines[start..end) into parent.
  function blocks(parent, lines) {
    let i = 0;
    let para = [];
    const flush = () => {
      if (para.length) {
        const p = parent.appendChild(el("p"));
        para.forEach((line, k) => {
          if (k) p.append(el("br"));
          inline(p, line.trim());
        });
        para = [];
      }
    };
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        flush();
        const fence = m[2];
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
        i++;
        // A labelled block: the language over the code, highlighted where highlight.js knows
        // the language, scrolled sideways rather than wrapped.
        const block = parent.appendChild(el("div", "md-codeblock"));
        if (m[3]) block.appendChild(el("div", "code-lang", m[3]));
        const pre = block.appendChild(el("pre", "md-code"));
        if (m[3]) pre.dataset.lang = m[3];
        const code = pre.appendChild(el("code"));
        if (typeof Highlight !== "undefined") Highlight.render(code, body.join("\n"), m[3]);
        else code.textContent = body.join("\n");
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      if ((m = HEADING.exec(line))) {
        flush();
        inline(parent.appendChild(el("h" + Math.min(6, m[1].length + 2))), m[2]);
        i++;
        continue;
      }
      if (RULE.test(line) && !para.length) { parent.append(el("hr")); i++; continue; }
      if (QUOTE.test(line)) {
        flush();
        const quoted = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { quoted.push(m[1]); i++; }
        blocks(parent.appendChild(el("blockquote")), quoted);
        continue;
      }
      if (/^\s*\|/.test(line)) {
        flush();
        const rows = [];
        while (i < lines.length && /^\s*\|/.test(lines[i])) rows.push(lines[i++].trim());
        parent.appendChild(el("pre", "md-table", rows.join("\n")));
        continue;
      }
      if ((m = ITEM.exec(line))) {
        flush();
        i = list(parent, lines, i, m[1].length);
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
  }

  // Renders a list starting at line i with items at `indent`; returns the next line index.
  function list(parent, lines, i, indent) {
    const ordered = /\d/.test(ITEM.exec(lines[i])[2]);
    const node = parent.appendChild(el(ordered ? "ol" : "ul"));
    if (ordered) node.start = parseInt(ITEM.exec(lines[i])[2], 10) || 1;
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const body = [m[3]];
      i++;
      // Continuation: indented lines (nested lists included) and single blank lines inside.
      while (i < lines.length) {
        const next = lines[i];
        const nested = ITEM.exec(next);
        if (next.trim() && (next.length - next.trimStart().length) > indent && (!nested || nested[1].length > indent)) {
          body.push(next.slice(Math.min(next.length - next.trimStart().length, indent + 2)));
          i++;
        } else if (!next.trim() && i + 1 < lines.length && (lines[i + 1].length - lines[i + 1].trimStart().length) > indent) {
          body.push("");
          i++;
        } else break;
      }
      const li = node.appendChild(el("li"));
      if (body.length === 1) inline(li, body[0]);
      else blocks(li, body);
      while (i < lines.length && !lines[i].trim() && ITEM.exec(lines[i + 1] || "")?.[1].length === indent) i++;
    }
    return i;
  }

  // The Markdown `text` as a fragment.
  function render(text) {
    const fragment = document.createDocumentFragment();
    blocks(fragment, String(text).replace(/\r\n?/g, "\n").split("\n"));
    return fragment;
  }

  return { render, inline, el };
})();

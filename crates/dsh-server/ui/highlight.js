// A small hand-written highlighter for code blocks (docs/web.md, "Code blocks"): one tokenizer
// for C-like, shell-like and data languages that marks comments, strings, numbers and keywords.
// It only splits text into spans with textContent, so model output cannot inject markup.
"use strict";

const Highlight = (() => {
  const words = (text) => new Set(text.split(" "));
  const C_LIKE = "if else for while do return break continue switch case default struct enum const static void int char long short float double unsigned signed sizeof typedef true false null";
  const LANGS = {
    rust: { line: "//", block: true, kw: words("as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while Some None Ok Err") },
    js: { line: "//", block: true, tmpl: true, kw: words("async await break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield") },
    ts: { line: "//", block: true, tmpl: true, kw: words("async await break case catch class const continue default do else enum export extends false finally for from function if implements import in interface let new null of private public readonly return static switch this throw true try type typeof undefined var void while") },
    python: { line: "#", kw: words("and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return self True try while with yield") },
    go: { line: "//", block: true, tmpl: true, kw: words("break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var nil true false") },
    c: { line: "//", block: true, kw: words(C_LIKE + " include define") },
    cpp: { line: "//", block: true, kw: words(C_LIKE + " class namespace public private protected template typename virtual new delete this auto using nullptr") },
    java: { line: "//", block: true, kw: words("abstract boolean break case catch class continue default do else extends final finally for if implements import instanceof int interface long new null package private protected public return static super switch this throw throws true false try void while var") },
    sh: { line: "#", kw: words("if then else elif fi for while do done case esac in function return export local set unset echo cd exit") },
    json: { kw: words("true false null") },
    toml: { line: "#", kw: words("true false") },
    yaml: { line: "#", kw: words("true false null yes no") },
  };
  const ALIASES = { rs: "rust", javascript: "js", jsx: "js", mjs: "js", typescript: "ts", tsx: "ts", py: "python", golang: "go", h: "c", "c++": "cpp", hpp: "cpp", cc: "cpp", bash: "sh", shell: "sh", zsh: "sh", console: "sh", yml: "yaml", jsonc: "json" };

  // The language table of a fence's info string, or null.
  function language(name) {
    const key = (name || "").toLowerCase();
    return LANGS[ALIASES[key] || key] ? ALIASES[key] || key : null;
  }

  // [[class or null, text], ...] for `code` in language `lang` (a key of LANGS).
  function tokens(code, lang) {
    const spec = LANGS[lang];
    const out = [];
    const push = (cls, text) => { if (text) out.push([cls, text]); };
    let i = 0;
    let plain = "";
    const flush = () => { push(null, plain); plain = ""; };
    while (i < code.length) {
      const rest = code.slice(i);
      let m = null;
      let cls = null;
      if (spec.line && rest.startsWith(spec.line)) { m = /^[^\n]*/.exec(rest); cls = "tok-com"; }
      else if (spec.block && rest.startsWith("/*")) { const end = rest.indexOf("*/", 2); m = [end < 0 ? rest : rest.slice(0, end + 2)]; cls = "tok-com"; }
      else if (rest[0] === '"' || rest[0] === "'" || (spec.tmpl && rest[0] === "`")) {
        // A quote in Rust may start a lifetime (`'a`): only a closed quote on the line is a string.
        const q = rest[0];
        const re = new RegExp(`^${q}(?:\\\\.|[^\\\\${q}\\n])*${q}`);
        m = re.exec(rest);
        cls = m ? "tok-str" : null;
      }
      else if (/[0-9]/.test(rest[0]) && !/[\w$]/.test(code[i - 1] || "")) { m = /^(0x[0-9a-fA-F_]+|[0-9][0-9_]*(\.[0-9_]+)?([eE][+-]?[0-9]+)?)[a-z0-9]*/.exec(rest); cls = "tok-num"; }
      else if (/[A-Za-z_$]/.test(rest[0]) && !/[\w$]/.test(code[i - 1] || "")) {
        m = /^[A-Za-z_$][\w$]*/.exec(rest);
        cls = spec.kw.has(m[0]) ? "tok-kw" : null;
        if (!cls && /^\s*\(/.test(rest.slice(m[0].length))) cls = "tok-fn";
      }
      if (m && m[0]) {
        if (cls) { flush(); push(cls, m[0]); } else plain += m[0];
        i += m[0].length;
      } else {
        plain += code[i];
        i += 1;
      }
    }
    flush();
    return out;
  }

  // Fills `codeNode` with `code`, highlighted when `name` is a language this table knows.
  function render(codeNode, code, name) {
    const lang = language(name);
    if (!lang) { codeNode.textContent = code; return; }
    codeNode.dataset.highlighted = lang;
    for (const [cls, text] of tokens(code, lang)) {
      if (!cls) { codeNode.append(text); continue; }
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = text;
      codeNode.append(span);
    }
  }

  return { render, language, tokens };
})();

// Building the page. Every piece of data goes in as text (append of a string,
// textContent), never as HTML: a message holding <script> shows as those characters.
// Characters that reorder or hide text (bidirectional controls, zero-width ones) are
// shown by their code point: "invoice_\u202Egnp.exe" must not read as "invoice_exe.png".
const HIDDEN = /[\u061C\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]/g;

export function visible(text) {
  return String(text).replace(HIDDEN, (c) => `\u27E8U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}\u27E9`);
}

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = visible(value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : visible(child));
  }
}

export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// Times are shown in UTC, as the audit trail records them, to the millisecond: the events
// of one turn often fall within one second.
export function utc(iso) {
  return iso ? new Date(iso).toISOString().replace("T", " ").replace("Z", " UTC") : "";
}

export function count(n, word) {
  return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}

export function errorBox(error) {
  return el("p", { class: "error", role: "alert" }, error.message || String(error));
}

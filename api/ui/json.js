// JSON shown as it is stored. JavaScript reads every number as a double, so a number a
// double cannot hold (12345678901234567891, 1e400, -0.0) would be shown as another one;
// and a JSON text read and written again loses a key named twice. An auditor must see
// what was stored, so:
// - `parseExact` reads the API's answers keeping such a number's text (as JSON.rawJSON,
//   which JSON.stringify writes as it is; where the browser has no such thing, as it did);
// - `indented` shows a JSON text (a tool call's arguments) indented, every token as written.

function exactNumber(key, value, context) {
  if (typeof value !== "number" || context?.source === undefined) return value;
  return JSON.stringify(value) === context.source ? value : JSON.rawJSON(context.source);
}

export function parseExact(text) {
  return typeof JSON.rawJSON === "function" ? JSON.parse(text, exactNumber) : JSON.parse(text);
}

const INDENT = "  ";

// `text` (valid JSON) with a line for each member and element, as JSON.stringify(_, null,
// 2) lays it out, its strings, numbers and keys as they are in `text`.
export function indented(text) {
  let out = "";
  let depth = 0;
  let inString = false;
  let escaped = false;
  const newline = () => `\n${INDENT.repeat(depth)}`;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      out += c;
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === " " || c === "\t" || c === "\n" || c === "\r") continue;
    if (c === '"') {
      inString = true;
      out += c;
    } else if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      let j = i + 1;
      while (" \t\n\r".includes(text[j])) j++;
      if (text[j] === close) { // empty: {} or [] on the line
        out += c + close;
        i = j;
      } else {
        depth++;
        out += c + newline();
      }
    } else if (c === "}" || c === "]") {
      depth--;
      out += newline() + c;
    } else if (c === ",") {
      out += c + newline();
    } else if (c === ":") {
      out += ": ";
    } else {
      out += c;
    }
  }
  return out;
}

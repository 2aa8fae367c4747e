// The sessions screen: find sessions by key prefix, a page at a time, with each one's
// last activity, message count and status; the loaded rows sort by any column.

import { getJSON } from "./api.js";
import { count, el, errorBox, replace, utc } from "./dom.js";

const PAGE = 25;
const COLUMNS = [
  ["key", "Session"],
  ["message_count", "Messages"],
  ["version", "Version"],
  ["updated_at", "Last activity"],
  ["status", "Status"],
];

export function sessionLink(key) {
  return `#/session/${encodeURIComponent(key)}`;
}

export function sessionsScreen(main, query) {
  const state = { prefix: query.get("prefix") || "", cursors: [null], rows: [], sort: "key", descending: false };
  const input = el("input", { type: "search", name: "prefix", value: state.prefix,
    placeholder: "key prefix, e.g. user-42/", "aria-label": "Session key prefix" });
  const table = el("div", { class: "table-box" });
  const pager = el("div", { class: "pager" });

  async function load() {
    replace(table, el("p", { class: "muted" }, "Loading…"));
    try {
      const page = await getJSON("/v1/session-heads",
        { prefix: state.prefix, cursor: state.cursors.at(-1), limit: PAGE });
      state.rows = page.sessions;
      state.next = page.next_cursor;
      render();
    } catch (error) {
      replace(table, errorBox(error));
    }
  }

  function sorted() {
    const rows = [...state.rows].sort((a, b) => {
      const x = a[state.sort], y = b[state.sort];
      return x < y ? -1 : x > y ? 1 : 0;
    });
    return state.descending ? rows.reverse() : rows;
  }

  function header([field, label]) {
    const mark = state.sort === field ? (state.descending ? " ▼" : " ▲") : "";
    return el("th", {}, el("button", { type: "button", class: "sort", "data-sort": field,
      onclick: () => {
        state.descending = state.sort === field ? !state.descending : false;
        state.sort = field;
        render();
      } }, label + mark));
  }

  function render() {
    if (!state.rows.length) {
      replace(table, el("p", { class: "muted" }, state.prefix
        ? `No session key starts with “${state.prefix}”.` : "No sessions yet."));
    } else {
      replace(table, el("table", { class: "sessions" },
        el("thead", {}, el("tr", {}, COLUMNS.map(header))),
        el("tbody", {}, sorted().map((s) => el("tr", {},
          el("td", {}, el("a", { href: sessionLink(s.key) }, s.key)),
          el("td", { class: "num" }, s.message_count.toLocaleString("en")),
          el("td", { class: "num" }, s.version.toLocaleString("en")),
          el("td", {}, utc(s.updated_at)),
          el("td", {}, el("span", { class: `status status-${s.status}` }, s.status)))))));
    }
    replace(pager,
      el("button", { type: "button", disabled: state.cursors.length === 1,
        onclick: () => { state.cursors.pop(); load(); } }, "◀ Previous page"),
      el("span", { class: "muted" }, `page ${state.cursors.length} · ${count(state.rows.length, "session")}`),
      el("button", { type: "button", disabled: !state.next,
        onclick: () => { state.cursors.push(state.next); load(); } }, "Next page ▶"));
  }

  const form = el("form", { class: "search", role: "search",
    onsubmit: (event) => {
      event.preventDefault();
      state.prefix = input.value;
      state.cursors = [null];
      load();
    } }, input, el("button", { type: "submit" }, "Find"));
  replace(main, el("h1", {}, "Sessions"), form, table, pager);
  load();
}

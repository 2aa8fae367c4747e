// A session's history at one version, shown from its newest message back, a page at a
// time: a session of any length paints after reading one page.

import { getJSON, sessionPath } from "./api.js";
import { el, errorBox } from "./dom.js";
import { renderMessages } from "./messages.js";

const PAGE = 50;

export function pagedHistory(key, version, total, emptyText = "No messages.") {
  const list = el("div", { class: "transcript" });
  const more = el("button", { type: "button", class: "older" });
  let start = total;

  async function older() {
    const from = Math.max(0, start - PAGE);
    more.disabled = true;
    const wanted = start - from;
    let page = await getJSON(sessionPath(key, "/messages"),
      { as_of_version: version, offset: from, limit: wanted });
    const messages = page.messages;
    // A page may end before its limit (the server's bytes per answer): its cursor goes on.
    while (messages.length < wanted && page.next_cursor) {
      page = await getJSON(sessionPath(key, "/messages"),
        { cursor: page.next_cursor, limit: wanted - messages.length });
      messages.push(...page.messages);
    }
    list.prepend(...renderMessages(messages, from));
    start = from;
    more.hidden = start === 0;
    more.disabled = false;
    more.textContent = `Show ${Math.min(PAGE, start)} older messages (${start.toLocaleString("en")} before these)`;
  }

  more.addEventListener("click", () => older().catch((error) => list.prepend(errorBox(error))));
  const box = el("div", {}, more, list);
  if (total === 0) {
    more.hidden = true;
    list.append(el("p", { class: "muted" }, emptyText));
    return { box, ready: Promise.resolve() };
  }
  return { box, ready: older() };
}


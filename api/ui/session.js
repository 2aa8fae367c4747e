// One session: its head, the verify badge, the export buttons, and three tabs: the
// transcript (paged from the newest message), the timeline with replay, and the diff.

import { download, getJSON, sessionPath } from "./api.js";
import { count, el, errorBox, replace, utc } from "./dom.js";
import { pagedHistory } from "./history.js";
import { diffTab, timelineTab } from "./replay.js";
import { sessionLink } from "./sessions.js";

const TABS = [["transcript", "Transcript"], ["timeline", "Timeline & replay"], ["diff", "Diff"]];

function verifyBadge(key) {
  const badge = el("span", { class: "badge", id: "verify-badge" }, "chain not checked");
  const button = el("button", { type: "button", id: "verify",
    onclick: async () => {
      button.disabled = true;
      replace(badge, "checking…").className = "badge";
      try {
        const check = await getJSON(sessionPath(key, "/verify"));
        badge.className = `badge ${check.intact ? "ok" : "bad"}`;
        replace(badge, check.intact
          ? `✓ chain intact: ${count(check.versions, "event")}, head ${check.head.slice(0, 16)}…`
          : `✗ chain broken at version ${check.first_bad_version}: ${check.problem}`);
        badge.title = check.head || "";
      } catch (error) {
        badge.className = "badge bad";
        replace(badge, error.message);
      } finally {
        button.disabled = false;
      }
    } }, "Verify chain");
  return el("span", { class: "verify" }, button, badge);
}

function exportButtons(key) {
  const note = el("span", { class: "muted", id: "export-note" });
  const button = (format) => el("button", { type: "button", id: `export-${format}`,
    onclick: async () => {
      try {
        replace(note, `saved ${await download(sessionPath(key, "/export"), { format })}`);
      } catch (error) {
        replace(note, errorBox(error));
      }
    } }, `Export ${format.toUpperCase()}`);
  return el("span", { class: "exports" }, button("jsonl"), button("csv"), note);
}

function summary(head) {
  return el("dl", { class: "head" },
    [["Version", head.version.toLocaleString("en")],
      ["Messages", head.message_count.toLocaleString("en")],
      ["Archived", head.archived_count.toLocaleString("en")],
      ["Tokens", head.token_total.toLocaleString("en")],
      ["Started", utc(head.created_at)],
      ["Last activity", utc(head.updated_at)],
      ["Last event", head.last_event]].map(([name, value]) => el("div", {}, el("dt", {}, name), el("dd", {}, value))));
}

export async function sessionScreen(main, key, tab) {
  if (key === "." || key === "..") {
    // A browser reads `.` and `..` (and %2E) in a URL's path as a step within the path,
    // so no request it sends can name such a session; the API takes them from others.
    replace(main, el("h1", { class: "key" }, key), el("p", { class: "error", role: "alert" },
      `A browser cannot read the session "${key}": it takes the key, even as %2E, for a step `
      + `within the URL's path. Read it with the CLI (session-ledger show ${key}) or any `
      + "HTTP client that sends %2E as it is."), el("a", { href: "#/sessions" }, "All sessions"));
    return;
  }
  replace(main, el("p", { class: "muted" }, "Loading…"));
  let head;
  try {
    head = await getJSON(sessionPath(key));
  } catch (error) {
    replace(main, el("h1", {}, key), errorBox(error), el("a", { href: "#/sessions" }, "All sessions"));
    return;
  }
  const body = el("section", { class: "tab-body" });
  const tabs = el("nav", { class: "tabs" }, TABS.map(([name, label]) => el("a", {
    href: `${sessionLink(key)}/${name}`, class: name === tab ? "active" : "",
    "aria-current": name === tab ? "page" : null }, label)));
  replace(main,
    el("p", {}, el("a", { href: "#/sessions" }, "◀ All sessions")),
    el("h1", { class: "key" }, key),
    el("div", { class: "tools" }, el("span", { class: `status status-${head.last_event === "HistoryCleared" ? "cleared" : "active"}` },
      head.last_event === "HistoryCleared" ? "cleared" : "active"), verifyBadge(key), exportButtons(key)),
    summary(head), tabs, body);
  if (tab === "timeline") return timelineTab(body, key, head);
  if (tab === "diff") return diffTab(body, key, head);
  const { box, ready } = pagedHistory(key, head.version, head.message_count);
  replace(body, el("h2", {}, `Transcript at version ${head.version} (${count(head.message_count, "message")})`), box);
  try {
    await ready;
    performance.mark("transcript-newest-shown");
    body.dataset.ready = "true";
  } catch (error) {
    body.append(errorBox(error));
  }
}

// The timeline (every event: who, what, why, when), replay at any version or moment
// (the history and the context window `get` gave then, for a chosen token limit), and
// the diff of two versions.

import { getJSON, sessionPath } from "./api.js";
import { count, el, errorBox, replace, utc } from "./dom.js";
import { renderMessages } from "./messages.js";
import { pagedHistory } from "./history.js";

const EVENTS_PAGE = 100;

// What each event changed, in a few words: one entry per event type (the tests hold it to
// the ledger's event classes, tests/unit/test_event_handlers.py).
const SUMMARIES = {
  SessionStarted: () => "started",
  MessagesAppended: (c) => `added ${count(c.added.length, "message")}`,
  HistoryReplaced: (c) => `kept ${c.kept}, removed ${c.removed_count ?? c.removed.length}, added ${c.added.length}`,
  HistoryCleared: (c) => `cleared ${count(c.cleared, "message")}`,
  MessageRemoved: (c) => `removed the message at position ${c.position}`,
  MessagesArchived: (c) => `archived ${count(c.archived, "message")}`,
  LegalHoldPlaced: (c) => (c.reference ? `placed the hold ${c.reference}` : "placed a hold"),
  LegalHoldReleased: (c) => (c.reference ? `released the hold ${c.reference}` : "released a hold"),
  SessionErased: (c) => `erased (${c.basis})`,
  SessionEncrypted: () => "sealed the content stored clear",
  StreamStarted: (c) => `opened stream ${c.stream_id}`,
  StreamChunksAppended: (c) => `${count(c.deltas.length, "delta")} to stream ${c.stream_id}`,
  StreamCompleted: (c) => `completed stream ${c.stream_id}`,
  StreamAborted: (c) => `aborted stream ${c.stream_id} (${c.cause})`,
};

function changeSummary(event) {
  if (!Object.hasOwn(SUMMARIES, event.event_type)) {
    throw new Error(`no summary for the event type ${event.event_type}`);
  }
  return SUMMARIES[event.event_type](event.changes);
}

function timeline(key, head, onPick) {
  const rows = el("tbody");
  const more = el("button", { type: "button" }, "Load more events");
  let after = 0;

  async function load() {
    more.disabled = true;
    const page = await getJSON(sessionPath(key, "/events"), { after, limit: EVENTS_PAGE });
    rows.append(...page.events.map((e) => el("tr", {},
      el("td", { class: "num" }, el("button", { type: "button", class: "link", "data-version": e.version,
        title: "Replay this version", onclick: () => onPick(e.version) }, String(e.version))),
      el("td", {}, utc(e.recorded_at)),
      el("td", {}, e.actor),
      el("td", {}, e.event_type),
      el("td", {}, changeSummary(e)),
      el("td", {}, e.reason ?? ""))));
    after = page.next_after ?? after;
    more.hidden = page.next_after === null;
    more.disabled = false;
  }

  more.addEventListener("click", () => load().catch((error) => rows.append(errorBox(error))));
  load().catch((error) => rows.append(errorBox(error)));
  return el("div", { class: "timeline" },
    el("table", {}, el("thead", {}, el("tr", {},
      ["Version", "When", "Who", "What", "Changes", "Why"].map((h) => el("th", {}, h)))), rows),
    more);
}

export function timelineTab(body, key, head) {
  const slider = el("input", { type: "range", id: "replay-version", min: 1, max: head.version,
    value: head.version, "aria-label": "Version" });
  const number = el("output", { for: "replay-version" }, String(head.version));
  const moment = el("input", { type: "datetime-local", id: "replay-moment", step: 0.001,
    "aria-label": "Moment (UTC)" });
  const limit = el("input", { type: "number", id: "replay-token-limit", min: 1,
    placeholder: "default", "aria-label": "Token limit" });
  const result = el("div", { class: "replay", id: "replay-result" });

  async function show(params) {
    replace(result, el("p", { class: "muted" }, "Replaying…"));
    try {
      const replay = await getJSON(sessionPath(key, "/replay"), { ...params, token_limit: limit.value });
      const s = replay.session, w = replay.window;
      slider.value = s.version;
      number.value = String(s.version);
      const history = pagedHistory(key, s.version, s.message_count, "The history was empty then.");
      replace(result,
        el("h3", { id: "replay-heading" }, `Version ${s.version} of ${head.version} · ${utc(s.updated_at)} · ${s.last_event}`),
        el("div", { class: "columns" },
          el("section", { id: "replay-history" },
            el("h4", {}, `History then: ${count(s.message_count, "message")}`), history.box),
          el("section", { id: "replay-window" },
            el("h4", { id: "window-tokens" },
              `Context window: ${count(w.token_count, "token")} of ${w.token_limit.toLocaleString("en")}, ${count(w.messages.length, "message")}`),
            el("div", { class: "transcript" }, renderMessages(w.messages)))));
      await history.ready;
      result.dataset.version = String(s.version);
    } catch (error) {
      replace(result, errorBox(error));
    }
  }

  slider.addEventListener("input", () => { number.value = slider.value; });
  slider.addEventListener("change", () => show({ as_of_version: slider.value }));
  const controls = el("form", { class: "replay-controls",
    onsubmit: (event) => {
      event.preventDefault();
      show(moment.value ? { as_of: `${moment.value}Z` } : { as_of_version: slider.value });
    } },
  el("label", {}, "Version ", slider, " ", number),
  el("label", {}, "or moment (UTC) ", moment),
  el("label", {}, "token limit ", limit),
  el("button", { type: "submit", id: "replay-go" }, "Replay"));
  replace(body, el("h2", {}, "Timeline"),
    timeline(key, head, (version) => { moment.value = ""; show({ as_of_version: version }); }),
    el("h2", {}, "Replay"), controls, result);
  return show({ as_of_version: head.version });
}

function changeBlock(change) {
  const where = change.kind === "added" ? `at position ${change.to_position}`
    : `at position ${change.from_position}`;
  return el("section", { class: `change change-${change.kind}` },
    el("h4", {}, `${change.kind} ${where}: ${change.removed.length ? `−${change.removed.length}` : ""}${change.added.length ? ` +${change.added.length}` : ""}`),
    change.removed.length ? el("div", { class: "removed" }, renderMessages(change.removed, change.from_position)) : null,
    change.added.length ? el("div", { class: "added" }, renderMessages(change.added, change.to_position)) : null);
}

export function diffTab(body, key, head) {
  const field = (id, value) => el("input", { type: "number", id, min: 1, max: head.version, value, required: true });
  const from = field("diff-from", Math.max(1, head.version - 1));
  const to = field("diff-to", head.version);
  const result = el("div", { id: "diff-result" });

  async function compare() {
    replace(result, el("p", { class: "muted" }, "Comparing…"));
    try {
      const diff = await getJSON(sessionPath(key, "/diff"), { from_version: from.value, to_version: to.value });
      const tally = (kind) => diff.changes.filter((c) => c.kind === kind).length;
      replace(result,
        el("p", { id: "diff-summary" }, `Version ${diff.from_version} (${count(diff.from_count, "message")}) → version ${diff.to_version} (${count(diff.to_count, "message")}): ` +
          (diff.changes.length ? `${tally("added")} added, ${tally("removed")} removed, ${tally("replaced")} replaced` : "no change to the history")),
        diff.changes.map(changeBlock));
    } catch (error) {
      replace(result, errorBox(error));
    }
  }

  replace(body, el("h2", {}, "Diff of two versions"),
    el("form", { class: "diff-controls", onsubmit: (event) => { event.preventDefault(); compare(); } },
      el("label", {}, "from version ", from), el("label", {}, "to version ", to),
      el("button", { type: "submit", id: "diff-go" }, "Compare")),
    result);
}

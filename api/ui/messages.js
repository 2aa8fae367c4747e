// One chat message as a conversation turn: its role, its text (long text folded), tool
// calls and tool results spelled out, images shown as images, other blocks by type.

import { el, visible } from "./dom.js";
import { indented } from "./json.js";

const FOLD_CHARS = 1200; // longer text shows its start and a button for the rest
const INLINE_IMAGE = /^image\/(png|jpeg|gif|webp)$/;

function folded(value, className = "text") {
  const text = typeof value === "string" ? value : pretty(value);
  if (text.length <= FOLD_CHARS) return el("div", { class: className }, text);
  const box = el("div", { class: className }, text.slice(0, FOLD_CHARS) + "…");
  const toggle = el("button", { type: "button", class: "fold" });
  let open = false;
  const show = () => {
    box.textContent = visible(open ? text : text.slice(0, FOLD_CHARS) + "…");
    toggle.textContent = open ? "Fold" : `Show all ${text.length.toLocaleString("en")} characters`;
  };
  toggle.addEventListener("click", () => {
    open = !open;
    show();
  });
  show();
  return el("div", {}, box, toggle);
}

// A value as JSON, indented; a string that is a JSON text (a tool call's arguments) as
// that text, indented, every token as stored (json.js); any other string as it is.
function pretty(value) {
  if (typeof value === "string") {
    try {
      JSON.parse(value);
    } catch {
      return value;
    }
    return indented(value);
  }
  return JSON.stringify(value, null, 2) ?? String(value);
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function image(block) {
  const type = block.image_mimetype || "";
  if (typeof block.image === "string" && INLINE_IMAGE.test(type)
      && /^[A-Za-z0-9+/=\s]+$/.test(block.image)) {
    return el("figure", { class: "image" },
      el("img", { src: `data:${type};base64,${block.image.replace(/\s/g, "")}`, alt: "image in the message" }),
      el("figcaption", {}, `image (${type})`));
  }
  // A linked image is named, not fetched: the viewer loads nothing from elsewhere. Bytes
  // of a type not shown inline (an SVG could run script) are said to be there.
  const link = block.url || block.path;
  const where = link ? pretty(link)
    : typeof block.image === "string" ? `${type || "no type"}, stored, not shown` : "stored without its bytes";
  return el("div", { class: "block image" }, `image: ${where}`);
}

function toolCall(name, args, id) {
  return el("div", { class: "tool-call" },
    el("div", { class: "label" }, `tool call: ${name || "?"}`, id ? ` (${id})` : ""),
    folded(pretty(args ?? {}), "code"));
}

function block(b) {
  if (!isObject(b)) return folded(pretty(b), "code");
  switch (b.block_type) {
    case "text":
      return folded(b.text);
    case "image":
      return image(b);
    case "tool_call":
      return toolCall(b.tool_name, b.tool_kwargs, b.tool_call_id);
    case "thinking":
      return el("div", { class: "block thinking" }, el("div", { class: "label" }, "thinking"),
        folded(b.content ?? ""));
    default: {
      const { block_type: type, ...rest } = b;
      return el("div", { class: "block" }, el("div", { class: "label" }, type),
        folded(pretty(rest), "code"));
    }
  }
}

// An OpenAI Agents item kept whole beside its text (api/openai_agents/items.py): its type
// is named, a call is spelled out as one, and the item itself is folded beneath.
function openaiItem(kwargs, blocks) {
  const item = kwargs.openai_item;
  if (!isObject(item)) return null;
  delete kwargs.openai_item;
  const args = item.arguments ?? item.input;
  const isCall = item.type === "function_call" || item.type === "custom_tool_call";
  // The call stands for the message's text only where that text is the call's own
  // (`name(arguments)`, as LedgerSession writes it); any other text is shown as well.
  const own = `${item.name ?? ""}(${typeof args === "string" ? args : ""})`;
  const only = blocks.length === 1 && blocks[0]?.block_type === "text" && blocks[0].text === own;
  const call = isCall ? toolCall(item.name, args, item.call_id) : null;
  return { item, kind: typeof item.type === "string" ? item.type : "message", call, only };
}

// An ADK event kept whole beside its blocks (api/google_adk/): its author and what it
// changed are named, the event itself folded beneath; the session's state the message
// carries is folded too, and the position of the message that holds it left out.
function adkEvent(kwargs) {
  const event = kwargs.adk_event;
  const state = kwargs.adk_state;
  const created = kwargs.adk_session;
  const stateAt = kwargs.adk_state_at;
  delete kwargs.adk_event;
  delete kwargs.adk_state;
  delete kwargs.adk_state_at;
  delete kwargs.adk_session;
  const shared = kwargs.adk_shared_state;
  delete kwargs.adk_shared_state;
  if (!event && state === undefined && !created && !shared && stateAt === undefined) return null;
  const parts = Array.isArray(event?.content?.parts) ? event.content.parts : [];
  const answered = parts.find((p) => p?.function_response)?.function_response;
  const delta = event?.actions?.state_delta;
  const changed = isObject(delta) ? Object.keys(delta) : [];
  const kind = created ? "ADK session" : shared ? "ADK shared state" : `by ${event?.author || "?"}`;
  return {
    kind,
    resultOf: answered?.id || answered?.name,
    details: [
      changed.length ? el("div", { class: "label" }, `state changed: ${changed.join(", ")}`) : null,
      event ? el("details", { class: "kwargs" }, el("summary", {}, `ADK event (invocation ${event.invocation_id || "?"})`),
        el("pre", { class: "code" }, pretty(event))) : null,
      state !== undefined || shared ? el("details", { class: "kwargs" }, el("summary", {}, "ADK state"),
        el("pre", { class: "code" }, pretty(state ?? shared))) : null,
      created ? el("details", { class: "kwargs" }, el("summary", {}, "ADK session"),
        el("pre", { class: "code" }, pretty(created))) : null,
      stateAt !== undefined ? el("div", { class: "label" }, `state held by message #${pretty(stateAt)}`) : null,
    ],
  };
}

function renderTurn(message, position) {
  const kwargs = { ...(isObject(message.additional_kwargs) ? message.additional_kwargs : {}) };
  const calls = Array.isArray(kwargs.tool_calls) ? kwargs.tool_calls.filter(isObject) : [];
  if (Array.isArray(kwargs.tool_calls) && calls.length === kwargs.tool_calls.length) delete kwargs.tool_calls;
  const blocks = Array.isArray(message.blocks) ? message.blocks : [];
  const agentsItem = openaiItem(kwargs, blocks);
  const adk = adkEvent(kwargs);
  const result = message.role === "tool" || message.role === "function";
  const resultOf = kwargs.tool_call_id || kwargs.name || agentsItem?.item.call_id || adk?.resultOf;
  const heading = el("div", { class: "meta" },
    el("span", { class: "role" }, result ? `${message.role} result` : message.role),
    agentsItem ? el("span", { class: "item-type" }, agentsItem.kind) : null,
    adk ? el("span", { class: "item-type" }, adk.kind) : null,
    position === undefined ? null : el("span", { class: "position" }, `#${position}`),
    result && resultOf ? el("span", { class: "for" }, `for ${resultOf}`) : null);
  const extra = Object.keys(kwargs).length
    ? el("details", { class: "kwargs" }, el("summary", {}, "additional_kwargs"),
      el("pre", { class: "code" }, pretty(kwargs)))
    : null;
  const item = agentsItem
    ? el("details", { class: "kwargs" }, el("summary", {}, `OpenAI item (${agentsItem.kind})`),
      el("pre", { class: "code" }, pretty(agentsItem.item)))
    : null;
  return el("article", { class: `message role-${message.role}` },
    heading,
    agentsItem?.call ?? null,
    agentsItem?.call && agentsItem.only ? null : blocks.map(block),
    calls.map((c) => toolCall(c.function?.name ?? c.name, c.function?.arguments ?? c.args, c.id)),
    item, adk?.details ?? null, extra);
}

// A message that cannot be shown as a turn (a shape no writer of ours makes) is shown as
// its JSON, and the others as turns: one such message must not hide a page.
export function renderMessage(message, position) {
  try {
    return renderTurn(message, position);
  } catch {
    return el("article", { class: "message unshown" },
      el("div", { class: "meta" }, el("span", { class: "role" }, "message shown as stored"),
        position === undefined ? null : el("span", { class: "position" }, `#${position}`)),
      folded(pretty(message), "code"));
  }
}

export function renderMessages(messages, firstPosition) {
  return messages.map((m, i) => renderMessage(m, firstPosition === undefined ? undefined : firstPosition + i));
}

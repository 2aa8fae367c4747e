// One chat message as a conversation turn: its role, its text (long text folded), tool
// calls and tool results spelled out, images shown as images, other blocks by type.

import { el } from "./dom.js";

const FOLD_CHARS = 1200; // longer text shows its start and a button for the rest
const INLINE_IMAGE = /^image\/(png|jpeg|gif|webp)$/;

function folded(text, className = "text") {
  if (text.length <= FOLD_CHARS) return el("div", { class: className }, text);
  const box = el("div", { class: className }, text.slice(0, FOLD_CHARS) + "…");
  const toggle = el("button", { type: "button", class: "fold" });
  let open = false;
  const show = () => {
    box.textContent = open ? text : text.slice(0, FOLD_CHARS) + "…";
    toggle.textContent = open ? "Fold" : `Show all ${text.length.toLocaleString("en")} characters`;
  };
  toggle.addEventListener("click", () => {
    open = !open;
    show();
  });
  show();
  return el("div", {}, box, toggle);
}

function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

function image(block) {
  const type = block.image_mimetype || "";
  if (typeof block.image === "string" && INLINE_IMAGE.test(type)
      && /^[A-Za-z0-9+/=\s]+$/.test(block.image)) {
    return el("figure", { class: "image" },
      el("img", { src: `data:${type};base64,${block.image.replace(/\s/g, "")}`, alt: "image in the message" }),
      el("figcaption", {}, `image (${type})`));
  }
  // A linked image is named, not fetched: the viewer loads nothing from elsewhere.
  const where = block.url || block.path || "stored without its bytes";
  return el("div", { class: "block image" }, `image: ${where}`);
}

function toolCall(name, args, id) {
  return el("div", { class: "tool-call" },
    el("div", { class: "label" }, `tool call: ${name || "?"}`, id ? ` (${id})` : ""),
    folded(pretty(args ?? {}), "code"));
}

function block(b) {
  switch (b.block_type) {
    case "text":
      return folded(b.text);
    case "image":
      return image(b);
    case "tool_call":
      return toolCall(b.tool_name, b.tool_kwargs, b.tool_call_id);
    case "thinking":
      return el("div", { class: "block thinking" }, el("div", { class: "label" }, "thinking"),
        folded(b.content || ""));
    default: {
      const { block_type: type, ...rest } = b;
      return el("div", { class: "block" }, el("div", { class: "label" }, type),
        folded(pretty(rest), "code"));
    }
  }
}

// An OpenAI Agents item kept whole beside its text (api/openai_agents/items.py): its type
// is named, a call is spelled out as one, and the item itself is folded beneath.
function openaiItem(kwargs) {
  const item = kwargs.openai_item;
  if (!item || typeof item !== "object" || Array.isArray(item)) return null;
  delete kwargs.openai_item;
  const call = item.type === "function_call" || item.type === "custom_tool_call"
    ? toolCall(item.name, item.arguments ?? item.input, item.call_id) : null;
  return { item, kind: item.type || "message", call };
}

// An ADK event kept whole beside its blocks (api/google_adk/): its author and what it
// changed are named, the event itself folded beneath; the session's state the message
// carries is folded too, and the position of the message that holds it left out.
function adkEvent(kwargs) {
  const event = kwargs.adk_event;
  const state = kwargs.adk_state;
  const created = kwargs.adk_session;
  delete kwargs.adk_event;
  delete kwargs.adk_state;
  delete kwargs.adk_state_at;
  delete kwargs.adk_session;
  const shared = kwargs.adk_shared_state;
  delete kwargs.adk_shared_state;
  if (!event && state === undefined && !created && !shared) return null;
  const answered = (event?.content?.parts || []).find((p) => p.function_response)?.function_response;
  const changed = Object.keys(event?.actions?.state_delta || {});
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
    ],
  };
}

export function renderMessage(message, position) {
  const kwargs = { ...(message.additional_kwargs || {}) };
  const calls = Array.isArray(kwargs.tool_calls) ? kwargs.tool_calls : [];
  delete kwargs.tool_calls;
  const agentsItem = openaiItem(kwargs);
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
    agentsItem?.call ?? (message.blocks || []).map(block),
    calls.map((c) => toolCall(c.function?.name ?? c.name, c.function?.arguments ?? c.args, c.id)),
    item, adk?.details ?? null, extra);
}

export function renderMessages(messages, firstPosition) {
  return messages.map((m, i) => renderMessage(m, firstPosition === undefined ? undefined : firstPosition + i));
}

// The viewer's entry point: sign-in with an API key, and the screens by address
// (#/sessions, #/session/<key>/<tab>). Any key the API takes works; a read-only auditor
// key is enough for every screen.

import { apiKey, getJSON, SIGNED_OUT } from "./api.js";
import { el, errorBox, replace } from "./dom.js";
import { sessionScreen } from "./session.js";
import { sessionsScreen } from "./sessions.js";

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");

function signInScreen(message) {
  const input = el("input", { type: "password", id: "api-key", autocomplete: "off",
    required: true, "aria-label": "API key" });
  const status = el("div", { id: "sign-in-status" }, message ? errorBox({ message }) : null);
  const form = el("form", { class: "sign-in", id: "sign-in",
    onsubmit: async (event) => {
      event.preventDefault();
      const key = input.value.trim();
      try {
        await getJSON("/v1/session-heads", { limit: 1 }, key); // proves the key, reads little
      } catch (error) {
        replace(status, errorBox(error.status === 401
          ? { message: `The API key was refused: ${error.message}.` } : error));
        return;
      }
      apiKey.set(key);
      route();
    } },
  el("h1", {}, "Sign in"),
  el("p", {}, "Enter an API key of your tenant (an auditor key is enough). It is kept in this browser tab only, until you sign out or close it."),
  el("label", {}, "API key ", input),
  el("button", { type: "submit" }, "Sign in"),
  status);
  replace(main, form);
  input.focus();
}

function route() {
  if (!apiKey.get()) {
    signOut.hidden = true;
    return signInScreen();
  }
  signOut.hidden = false;
  const [path, search = ""] = window.location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "session" && parts[1]) {
    let key;
    try {
      key = decodeURIComponent(parts[1]);
    } catch {
      return replace(main, errorBox({ message: "This address does not name a session." }));
    }
    return sessionScreen(main, key, parts[2] || "transcript");
  }
  return sessionsScreen(main, new URLSearchParams(search));
}

window.addEventListener(SIGNED_OUT, (event) => {
  signOut.hidden = true;
  signInScreen(`Signed out: ${event.detail}.`);
});
signOut.addEventListener("click", () => {
  apiKey.clear();
  route();
});
window.addEventListener("hashchange", route);
route();

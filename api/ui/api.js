// The HTTP API, called with the API key of this browser session. The key lives in
// sessionStorage (gone when the tab closes) and travels only in the Authorization header:
// never in a URL, never in a cookie.

import { parseExact } from "./json.js";

const STORAGE_NAME = "session-ledger-api-key";
export const SIGNED_OUT = "session-ledger-signed-out";

export const apiKey = {
  get: () => sessionStorage.getItem(STORAGE_NAME),
  set: (key) => sessionStorage.setItem(STORAGE_NAME, key),
  clear: () => sessionStorage.removeItem(STORAGE_NAME),
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// A session key as one path segment: every byte outside A-Z a-z 0-9 - . _ ~ as %XX
// (encodeURIComponent leaves ! ' ( ) * as they are), and "." / ".." spelled out.
export function sessionPath(key, tail = "") {
  let segment = encodeURIComponent(key).replace(
    /[!'()*]/g,
    (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase(),
  );
  return `/v1/sessions/${segment}${tail}`;
}

async function request(path, params = {}, key = apiKey.get()) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const response = await fetch(url, {
    headers: { Authorization: `Bearer ${key}` },
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) {
    let error = {};
    try {
      error = (await response.json()).error || {};
    } catch {
      // not the API's error shape: the status says enough
    }
    const failure = new ApiError(response.status, error.code || "http_error",
      error.message || `${response.status} ${response.statusText}`);
    if (response.status === 401 && key === apiKey.get()) {
      // The stored key stopped working (revoked): forget it and ask for another.
      apiKey.clear();
      window.dispatchEvent(new CustomEvent(SIGNED_OUT, { detail: failure.message }));
    }
    throw failure;
  }
  return response;
}

// An answer's JSON, each number as the server wrote it (json.js): a stored number a
// double cannot hold is shown as stored, not as the double nearest it.
export async function getJSON(path, params, key) {
  return parseExact(await (await request(path, params, key)).text());
}

// Saves an export under the name the server gives it. The file comes through fetch (the
// key is a header), so it is handed to the browser as a blob.
export async function download(path, params) {
  const response = await request(path, params);
  const disposition = response.headers.get("Content-Disposition") || "";
  const name = /filename="([^"]+)"/.exec(disposition)?.[1] || "export";
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  return name;
}

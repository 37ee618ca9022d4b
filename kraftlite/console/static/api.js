// Calls to this node's HTTP API (relative URLs: any node, behind any plain load balancer).
// With auth.required, a bearer token from POST /v1/tokens, kept in this tab only.

const TOKEN = "kraftlite.console.token";
const CONSOLE = { "X-Kraftlite-Console": "1" };

export class AuthRequired extends Error {}

export class ApiError extends Error {
  constructor(status, body, text) {
    super((body && body.message) || text || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

function url(path) {
  return ".." + path; // the console is at /ui/: ../v1/x is /v1/x
}

export async function call(method, path, body) {
  const headers = { Accept: "application/json", ...CONSOLE };
  const token = sessionStorage.getItem(TOKEN);
  if (token) headers.Authorization = "Bearer " + token;
  // only the console's token authenticates it: a Basic password the browser cached for
  // this origin would otherwise keep a logged-out console logged in
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url(path), init);
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN);
    throw new AuthRequired("authentication required");
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data, text);
  return data;
}

export const get = (path) => call("GET", path);

function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return "Basic " + btoa(binary);
}

export async function login(user, password) {
  const response = await fetch(url("/v1/tokens"), {
    method: "POST",
    headers: { Authorization: basic(user, password), Accept: "application/json", ...CONSOLE },
    cache: "no-store",
  });
  const data = await response.json().catch(() => null);
  if (!response.ok || !data || !data.token) {
    throw new ApiError(response.status, data, "login failed");
  }
  sessionStorage.setItem(TOKEN, data.token);
}

export function logout() {
  sessionStorage.removeItem(TOKEN);
}

export function loggedIn() {
  return sessionStorage.getItem(TOKEN) !== null;
}

// "a b" -> "a%20b": names in paths (topic names are safe already; group names may not be)
// One path segment; "." and ".." would be resolved by the browser to another resource,
// and no topic or group is named so.
export const part = (text) => {
  const value = String(text);
  if (value === "." || value === "..") throw new Error(`no resource is named ${value}`);
  return encodeURIComponent(value);
};

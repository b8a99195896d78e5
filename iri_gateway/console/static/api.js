// The console's only way to the gateway: the public REST API under /api/v2, as the signed-in
// user. Two ways to be signed in: a bearer token the user pasted, kept in sessionStorage (this
// tab, this session) only; or a session the gateway opened after an OpenID sign-in, whose
// cookie is HttpOnly (no script reads it): then every request that may change carries the
// session's CSRF token (a readable cookie) in X-CSRF-Token, which no other site can send.

const KEY = "iri-gateway.token";
const CSRF_COOKIES = ["__Host-iri-csrf", "iri-csrf"];
const SAFE_METHODS = ["GET", "HEAD"];

export function storedToken() {
  return sessionStorage.getItem(KEY);
}

export function keepToken(token) {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}

/** The CSRF token of the gateway's session (an OpenID sign-in), or null without one. */
export function sessionCsrf() {
  for (const pair of document.cookie.split(";")) {
    const [name, ...value] = pair.trim().split("=");
    if (CSRF_COOKIES.includes(name) && value.join("=")) return value.join("=");
  }
  return null;
}

/** Forget the session's readable cookie (its HttpOnly one is the gateway's to end). */
export function forgetSession() {
  const secure = location.protocol === "https:" ? "; Secure" : "";
  for (const name of CSRF_COOKIES) document.cookie = `${name}=; Max-Age=0; Path=/${secure}`;
}

/** Signed in at all: a pasted token, or a session of the gateway's. */
export function signedIn() {
  return Boolean(storedToken() || sessionCsrf());
}

/** What a request of `method` needs to be the user's: headers to add and fetch's
 * `credentials` (cookies only for the session; a token never travels with cookies). */
export function authentication(method = "GET", token = storedToken()) {
  if (token) return { headers: { Authorization: `Bearer ${token}` }, credentials: "omit" };
  const csrf = sessionCsrf();
  const headers = csrf && !SAFE_METHODS.includes(method) ? { "X-CSRF-Token": csrf } : {};
  return { headers, credentials: "same-origin" };
}

/** An answer of the API that is not a success, with its problem+json when it sent one.
 * A 429 (a request rate used up) also says when to try again: `retryAfter` seconds (the
 * Retry-After header), and the message names the limit and the time. */
export class ApiError extends Error {
  constructor(status, problem, text, retryAfter = null) {
    const detail = problem && typeof problem === "object"
      ? [problem.detail || problem.title, ...(problem.invalid_params || [])
          .map((p) => `${p.name}: ${p.reason}`)].filter(Boolean).join("; ")
      : text;
    super(status === 429 ? tooMany(problem, detail, retryAfter)
      : `${status} ${(problem && problem.title) || ""}: ${detail || "no reason given"}`);
    this.status = status;
    this.problem = problem;
    this.detail = detail || "";
    this.retryAfter = retryAfter;
  }
}

/** The words of a 429: the problem's own message, then when to try again. */
function tooMany(problem, detail, retryAfter) {
  const limit = problem && problem.limit ? ` (limit ${problem.limit}: ${
    problem.limit_value} per second)` : "";
  const when = retryAfter === null ? "in a moment" : `after ${
    new Date(Date.now() + retryAfter * 1000).toLocaleTimeString()} (in ${retryAfter} s)`;
  return `Too many requests${limit}: ${detail || "the gateway is busy"}. You may try ` +
    `again ${when}.`;
}

/** Call `/api/v2` + path (with `headers` added); resolves to the decoded JSON (null for 204), rejects with ApiError. */
export async function call(path, { method = "GET", body, token = storedToken(),
  headers: extra = {} } = {}) {
  const who = authentication(method, token);
  const headers = { ...extra, ...who.headers, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`/api/v2${path}`, {
    method, headers, cache: "no-store", credentials: who.credentials,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const pause = Number.parseInt(response.headers.get("Retry-After") || "", 10);
    throw new ApiError(response.status, data, text, Number.isNaN(pause) ? null : pause);
  }
  return data;
}

/** The sign-in page's address that comes back to this page afterwards. */
export function signInAddress() {
  return `/console/sign-in?next=${encodeURIComponent(location.pathname + location.search)}`;
}

// The console's only way to the gateway: the public REST API under /api/v2, with the bearer
// token the user pasted. The token lives in sessionStorage (this tab, this session) only.

const KEY = "iri-gateway.token";

export function storedToken() {
  return sessionStorage.getItem(KEY);
}

export function keepToken(token) {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
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
  const headers = { ...extra, Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`/api/v2${path}`, {
    method, headers, cache: "no-store", credentials: "omit",
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

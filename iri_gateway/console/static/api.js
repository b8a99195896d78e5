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

/** An answer of the API that is not a success, with its problem+json when it sent one. */
export class ApiError extends Error {
  constructor(status, problem, text) {
    const detail = problem && typeof problem === "object"
      ? [problem.detail || problem.title, ...(problem.invalid_params || [])
          .map((p) => `${p.name}: ${p.reason}`)].filter(Boolean).join("; ")
      : text;
    super(`${status} ${(problem && problem.title) || ""}: ${detail || "no reason given"}`);
    this.status = status;
    this.problem = problem;
    this.detail = detail || "";
  }
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
  if (!response.ok) throw new ApiError(response.status, data, text);
  return data;
}

/** The sign-in page's address that comes back to this page afterwards. */
export function signInAddress() {
  return `/console/sign-in?next=${encodeURIComponent(location.pathname + location.search)}`;
}

// Sign-in: with the facility's identity provider (OpenID Connect, when the gateway offers it:
// GET /console/session says), or with a pasted token, checked by asking the API who the caller
// is (GET /account/me); a refusal shows the API's own reason (its 401 problem detail) and
// keeps nothing. A sign-in at the provider that failed comes back here with its reason
// (`?failed=`), shown as text.
import { call, keepToken, ApiError } from "./api.js";
import { say } from "./dom.js";

const form = document.getElementById("sign-in");
const input = document.getElementById("token");
const query = new URLSearchParams(location.search);
document.getElementById("signed-out").hidden = !query.has("signed-out");
if (query.get("failed")) {
  say("sign-in-failed", `Sign-in at the identity provider failed: ${query.get("failed")}`);
  document.getElementById("sign-in-failed").hidden = false;
}

/** Only a console page may be the destination (no open redirect). */
function destination() {
  const next = query.get("next") || "";
  return /^\/console\/[a-z-]+(\?[^#]*)?$/.test(next) && !next.startsWith("/console/sign-in")
    ? next : "/console/sites";
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = input.value.trim();
  if (!token) {
    say("sign-in-error", "Paste a token first: the field is empty.");
    input.focus();
    return;
  }
  say("sign-in-error", "");
  form.setAttribute("aria-busy", "true");
  try {
    await call("/account/me", { token });
    keepToken(token);
    location.assign(destination());
  } catch (error) {
    const reason = error instanceof ApiError
      ? (error.status === 429 ? error.message
        : `The gateway refused this token (${error.status}): ${error.detail}`)
      : `The gateway could not be reached: ${error.message}`;
    say("sign-in-error", reason);
    input.select();
  } finally {
    form.removeAttribute("aria-busy");
  }
});

/** Offer the identity provider's sign-in when the gateway has one; else the token field. */
async function offerOpenId() {
  let session = null;
  try {
    const response = await fetch("/console/session", { cache: "no-store", credentials: "omit" });
    session = response.ok ? await response.json() : null;
  } catch {
    session = null;
  }
  if (!session || !session.openid) {
    input.focus();
    return;
  }
  document.getElementById("openid-provider").textContent = session.provider;
  const link = document.getElementById("openid-sign-in");
  link.href = `/console/sign-in/openid?next=${encodeURIComponent(destination())}`;
  document.getElementById("openid").hidden = false;
  link.focus();
}
offerOpenId();

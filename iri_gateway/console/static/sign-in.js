// Sign-in: the token is checked by asking the API who the caller is (GET /account/me); a refusal shows
// the API's own reason (its 401 problem detail) and keeps nothing.
import { call, keepToken, ApiError } from "./api.js";
import { say } from "./dom.js";

const form = document.getElementById("sign-in");
const input = document.getElementById("token");
const query = new URLSearchParams(location.search);
document.getElementById("signed-out").hidden = !query.has("signed-out");

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
input.focus();

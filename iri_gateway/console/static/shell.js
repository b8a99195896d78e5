// What every page behind the sign-in shares: no token sends you to sign in, the header shows
// who you are (GET /account/me) and signs you out, the menu offers the admins' pages
// (data-admin-only) to facility admins only, and a token the API stops accepting ends the
// session. "Your limits" lists the caller's request rates and quotas with their use
// (GET /account/limits); a 429 anywhere shows its message and when to try again.
import {
  authentication, call, forgetSession, forgetToken, signedIn, signInAddress, storedToken,
} from "./api.js";
import { el, fill } from "./dom.js";

/** True when signed in; otherwise leaves for the sign-in page. */
export function requireSignIn() {
  if (!signedIn()) {
    location.replace(signInAddress());
    return false;
  }
  document.getElementById("sign-out").addEventListener("click", signOut);
  showWho();
  return true;
}

/** Sign out: a pasted token is forgotten; a session is ended by the gateway (on every
 * replica), then the browser goes where it says (the identity provider's sign-out page, when
 * it has one, which comes back to the sign-in page). */
async function signOut() {
  if (storedToken()) {
    forgetToken();
    location.assign("/console/sign-in?signed-out=1");
    return;
  }
  let then = "/console/sign-in?signed-out=1";
  try {
    const who = authentication("POST");
    const response = await fetch("/console/sign-out", {
      method: "POST", headers: who.headers, credentials: who.credentials, cache: "no-store",
    });
    if (response.ok) then = (await response.json()).then || then;
  } finally {
    forgetSession();
    location.assign(then);
  }
}

let asked = null;

/** The caller as its token describes it: {user, projects, admin, access, expires}, asked
 * once per page. */
export function me() {
  asked ??= call("/account/me");
  return asked;
}

async function showWho() {
  const who = document.getElementById("who");
  try {
    const caller = await me();
    const projects = caller.projects.length
      ? `projects: ${caller.projects.join(", ")}` : "no projects";
    // A token that may only read says so up front: a cancel or a submit is refused (403).
    const reads = caller.access === "read" ? "; may only read" : "";
    const ends = caller.expires ? `; until ${caller.expires.replace("T", " ").replace("Z", " UTC")}`
      : "";
    who.textContent = `Signed in as ${caller.user} (${projects}${
      caller.admin ? "; facility admin" : ""}${reads}${ends})`;
    for (const item of document.querySelectorAll("[data-admin-only]")) {
      item.hidden = !caller.admin;
    }
  } catch (error) {
    if (!expired(error) && error.status === 429) who.textContent = error.message;
    return;
  }
  const limits = document.getElementById("limits");
  limits.addEventListener("toggle", () => {
    if (limits.open) showLimits();
  });
  limits.hidden = false;
}

/** The caller's rates and quotas, with their use, in the "Your limits" list. */
async function showLimits() {
  const list = document.getElementById("limits-list");
  try {
    const limits = await call("/account/limits");
    fill(list,
      limits.rates.map((rate) => el("li", { "data-limit": rate.limit },
        `${rate.limit === "read_rate" ? "Reads" : "Changes"}: ${Math.round(rate.used)} of ${
          rate.allowed} per ${rate.window_seconds} s (${rate.per_second} per second)`)),
      limits.quotas.map((quota) => el("li", { "data-limit": quota.limit },
        `${quota.limit === "tasks_per_user" ? "Unfinished file tasks" : "Unfinished jobs"}${
          quota.resource_id ? ` on ${quota.resource_id}` : ""}: ${quota.used} of ${
          quota.limit_value}`)),
      el("li", {}, `File tasks run at once: ${limits.tasks_running_per_user} per gateway ` +
        "process (more wait their turn)"));
  } catch (error) {
    if (!expired(error)) fill(list, el("li", { class: "error" }, error.message));
  }
}

/** After a 401 the token or the session is useless: forget it and go to the sign-in page. */
export function expired(error) {
  if (error && error.status === 401) {
    forgetToken();
    forgetSession();
    location.replace(signInAddress());
    return true;
  }
  return false;
}

// What every page behind the sign-in shares: no token sends you to sign in, the header shows
// who you are (GET /account/me) and signs you out, the menu offers the admins' pages
// (data-admin-only) to facility admins only, and a token the API stops accepting ends the
// session.
import { call, forgetToken, signInAddress, storedToken } from "./api.js";

/** True when signed in; otherwise leaves for the sign-in page. */
export function requireSignIn() {
  if (!storedToken()) {
    location.replace(signInAddress());
    return false;
  }
  document.getElementById("sign-out").addEventListener("click", () => {
    forgetToken();
    location.assign("/console/sign-in?signed-out=1");
  });
  showWho();
  return true;
}

let asked = null;

/** The caller as its token describes it: {user, projects, admin}, asked once per page. */
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
    who.textContent = `Signed in as ${caller.user} (${projects}${
      caller.admin ? "; facility admin" : ""})`;
    for (const item of document.querySelectorAll("[data-admin-only]")) {
      item.hidden = !caller.admin;
    }
  } catch (error) {
    expired(error);
  }
}

/** After a 401 the token is useless: forget it and go to the sign-in page. */
export function expired(error) {
  if (error && error.status === 401) {
    forgetToken();
    location.replace(signInAddress());
    return true;
  }
  return false;
}

// What every page behind the sign-in shares: no token sends you to sign in, the header shows
// who you are and signs you out, and a token the API stops accepting ends the session.
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

async function showWho() {
  const who = document.getElementById("who");
  try {
    const projects = await call("/account/projects");
    const users = projects.flatMap((p) => p.user_ids || []);
    const names = projects.map((p) => p.id).join(", ");
    who.textContent = users.length
      ? `Signed in as ${users[0]} (projects: ${names})` : "Signed in (no projects)";
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

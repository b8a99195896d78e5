// Profiles (for admins): a profile's YAML, pasted or read from a picked file in this browser,
// sent as text to POST /facility/profile-check. A profile that does not load comes back as a
// 422 whose `errors` carry file:line: field: reason, listed here; one that loads, as its check
// matrix: one row per resource, runtime and sample job, its outcome in words (ok, unsupported,
// FAIL) as well as colour. Every string goes in with textContent (dom.js), never as HTML.
// Only facility admins may check (the API answers anybody else 403): a non-admin who opens
// the page by its address is told so, and the form is taken away.
import { ApiError, call } from "./api.js";
import { el, fill, say } from "./dom.js";
import { expired, me, requireSignIn } from "./shell.js";

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
let name = "profile.yaml";

function setName(value) {
  name = NAME.test(value) ? value : "profile.yaml";
  document.getElementById("profile-name").textContent = name;
}

function showProblems(errors) {
  const items = errors.map((e) => el("li", {},
    el("span", { class: "line" }, e.line === null ? "no line" : `line ${e.line}`), " ",
    el("code", {}, e.message)));
  fill(document.getElementById("problem-list"), items);
  document.getElementById("problems").hidden = false;
}

function outcomeCell(outcome) {
  const words = { ok: "pass", unsupported: "not applicable", FAIL: "FAIL" };
  return el("td", {}, el("span", { class: `outcome outcome-${outcome.toLowerCase()}` },
    `${words[outcome]} (${outcome})`));
}

function showMatrix(report) {
  const ok = report.cells.filter((c) => c.outcome === "ok").length;
  const unsupported = report.cells.filter((c) => c.outcome === "unsupported").length;
  document.getElementById("matrix-summary").textContent = report.passed
    ? `Passed: no cell failed. ${ok} of ${report.cells.length} sample jobs rendered and linted `
      + `clean (${report.linted}); ${unsupported} not applicable to the resource. `
      + `${report.resources} resource(s).`
    : `FAILED: ${report.failed} of ${report.cells.length} cells failed (${report.linted}).`;
  const head = el("thead", {}, el("tr", {},
    ["resource", "runtime", "sample job", "result", "detail"].map((h) =>
      el("th", { scope: "col" }, h))));
  const rows = report.cells.map((c) => el("tr", { class: `cell-${c.outcome.toLowerCase()}` },
    el("td", {}, c.resource), el("td", {}, c.runtime), el("td", {}, c.sample),
    outcomeCell(c.outcome), el("td", { class: "message" }, c.detail)));
  fill(document.getElementById("matrix"), el("table", { class: "jobs matrix" },
    el("caption", {}, `Check matrix of ${report.name}`), head, el("tbody", {}, rows)));
  document.getElementById("matrix-section").hidden = false;
}

async function check(event) {
  event.preventDefault();
  const button = document.getElementById("check");
  document.getElementById("problems").hidden = true;
  document.getElementById("matrix-section").hidden = true;
  say("error", "");
  say("check-status", "Checking…");
  button.disabled = true;
  try {
    const report = await call("/facility/profile-check", {
      method: "POST", body: { profile: document.getElementById("profile-text").value, name },
    });
    say("check-status", report.passed ? "The profile loads and no sample job failed."
      : "The profile loads, but some sample jobs failed.");
    showMatrix(report);
  } catch (error) {
    if (expired(error)) return;
    if (error instanceof ApiError && error.status === 422 && error.problem
        && Array.isArray(error.problem.errors)) {
      say("check-status", `The profile does not load: ${error.problem.errors.length} error(s).`);
      showProblems(error.problem.errors);
    } else {
      say("check-status", "");
      say("error", error instanceof ApiError ? error.message : `Cannot check: ${error}`);
    }
  } finally {
    button.disabled = false;
  }
}

async function pick(event) {
  const file = event.target.files[0];
  if (!file) return;
  document.getElementById("profile-text").value = await file.text();
  setName(file.name);
  say("check-status", `Read ${file.name} (${file.size} bytes); press Check.`);
}

async function refuseNonAdmins() {
  let caller;
  try {
    caller = await me();
  } catch {
    return; // the header reports it (and a 401 ends the session)
  }
  if (caller.admin) return;
  document.getElementById("admins-only").hidden = false;
  document.getElementById("profile-form").hidden = true;
}

if (requireSignIn()) {
  refuseNonAdmins();
  document.getElementById("profile-form").addEventListener("submit", check);
  document.getElementById("profile-file").addEventListener("change", pick);
  document.getElementById("profile-text").addEventListener("input", () => {
    if (!document.getElementById("profile-file").value) setName("profile.yaml");
  });
}

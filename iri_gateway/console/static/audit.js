// Audit log (for admins): GET /audit, newest first, 50 to a page, filtered by user, operation
// and a time range (the browser's local time, sent as UTC). Every string goes in with
// textContent (dom.js), never as HTML: a path or user name in a record is shown, not parsed.
// Only facility admins may read it: anybody else is told so and the page never asks the API
// for records (which would answer 403 anyway).
import { ApiError, call } from "./api.js";
import { el, fill, say } from "./dom.js";
import { expired, me, requireSignIn } from "./shell.js";

const PAGE = 50;
let offset = 0;

function query() {
  const params = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
  for (const name of ["user", "operation"]) {
    const value = document.getElementById(`filter-${name}`).value.trim();
    if (value) params.set(name, value);
  }
  for (const name of ["since", "until"]) {
    const value = document.getElementById(`filter-${name}`).value;
    if (value) params.set(name, new Date(value).toISOString());
  }
  return params;
}

function outcome(record) {
  const words = [record.outcome, record.status, record.error].filter((w) => w !== null);
  return el("td", {}, el("span", { class: `outcome outcome-${record.outcome}` }, words.join(" ")));
}

function show(page) {
  const head = el("thead", {}, el("tr", {},
    ["time (UTC)", "user", "operation", "resource", "target", "outcome", "request id"]
      .map((h) => el("th", { scope: "col" }, h))));
  const rows = page.records.map((r) => el("tr", { "data-id": r.id },
    el("td", {}, r.time.replace("T", " ").replace(/\.\d+Z$/, "Z")),
    el("td", {}, r.admin ? `${r.user} (admin)` : r.user),
    el("td", {}, el("code", {}, r.operation)),
    el("td", {}, r.resource_id || "-"),
    el("td", { class: "message" }, r.target || "-"),
    outcome(r),
    el("td", {}, el("code", {}, r.request_id || "-"))));
  fill(document.getElementById("audit"), el("table", { class: "jobs audit" },
    el("caption", {}, "Audit records, newest first"), head, el("tbody", {}, rows)));
  const last = offset + page.records.length;
  say("audit-count", page.records.length
    ? `Records ${offset + 1} to ${last}${page.more ? " (older ones on the next page)" : ""}.`
    : "No record matches.");
  document.getElementById("pager").hidden = offset === 0 && !page.more;
  document.getElementById("page-previous").disabled = offset === 0;
  document.getElementById("page-next").disabled = !page.more;
}

async function load() {
  say("error", "");
  try {
    show(await call(`/audit?${query()}`));
  } catch (error) {
    if (expired(error)) return;
    fill(document.getElementById("audit"));
    say("audit-count", "");
    say("error", error instanceof ApiError ? error.message : `Cannot read the audit log: ${error}`);
  }
}

async function start() {
  let caller;
  try {
    caller = await me();
  } catch {
    return; // the header reports it (and a 401 ends the session)
  }
  if (!caller.admin) {
    document.getElementById("admins-only").hidden = false;
    return;
  }
  document.getElementById("audit-page").hidden = false;
  document.getElementById("audit-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    offset = 0;
    load();
  });
  document.getElementById("page-previous").addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    load();
  });
  document.getElementById("page-next").addEventListener("click", () => {
    offset += PAGE;
    load();
  });
  load();
}

if (requireSignIn()) start();

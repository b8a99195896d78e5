// Jobs: the caller's jobs on every resource (POST /compute/status/{resource}), refreshed every
// few seconds; a cluster job unfolds into its members (meta_data.members), primary first;
// cancel is DELETE /compute/cancel/{resource}/{id}. The API shows only the caller's jobs.
// `?job=ID` opens that job's details.
import { ApiError, call } from "./api.js";
import { el, fill, say } from "./dom.js";
import { expired, requireSignIn } from "./shell.js";

const REFRESH_MS = 2000;
const FINAL = new Set(["completed", "failed", "canceled"]);
const TAIL_LINES = 20;
const unfolded = new Set();
const detailed = new Set();
const outputs = new Map();
let resources = [];
let jobs = [];
let shownKey = "";

/** Members in the order a person reads them: roles as the JobSpec lists them, then index. */
function members(job) {
  const listed = job.status.meta_data.members || [];
  const roles = ((job.job_spec && job.job_spec.roles) || []).map((r) => r.name);
  const rank = (m) => (roles.includes(m.role) ? roles.indexOf(m.role) : roles.length);
  return [...listed].sort((a, b) => rank(a) - rank(b) || a.index - b.index);
}

function stateCell(state) {
  return el("td", {}, el("span", { class: `state state-${state}` }, state));
}

/** A time of the API (seconds since the epoch, or ISO 8601) as "YYYY-MM-DD hh:mm:ss UTC". */
function when(time) {
  if (time === null || time === undefined) return "";
  const date = typeof time === "number" ? new Date(time * 1000) : new Date(time);
  return Number.isNaN(date.getTime()) ? String(time)
    : `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

function submitted(job) {
  const first = (job.status.meta_data.history || [])[0];
  return first ? Number(first.time) || 0 : 0;
}

function jobRows(job) {
  const resource = job.status.meta_data.resource_id;
  const name = (job.job_spec && job.job_spec.name) || "(no name)";
  const list = members(job);
  const open = unfolded.has(job.id);
  const fold = list.length
    ? el("button", { type: "button", class: "fold", "aria-expanded": String(open),
      "data-key": `fold:${job.id}`, "aria-label": `${open ? "Fold" : "Unfold"} the ${
        list.length} members of ${name}` }, `${open ? "▾" : "▸"} ${list.length} members`)
    : null;
  const cancel = FINAL.has(job.status.state) ? null
    : el("button", { type: "button", class: "cancel", "data-key": `cancel:${job.id}`,
      "aria-label": `Cancel ${name}` }, "Cancel");
  const openDetail = detailed.has(job.id);
  const details = el("button", { type: "button", class: "details", "aria-expanded":
    String(openDetail), "data-key": `details:${job.id}`, "aria-label": `${openDetail
    ? "Hide" : "Show"} the history and output of ${name}` }, openDetail ? "Hide details"
    : "Details");
  details.addEventListener("click", () => toggleDetail(job));
  if (fold) fold.addEventListener("click", () => toggle(job.id));
  if (cancel) cancel.addEventListener("click", () => cancelJob(resource, job.id, name));
  const row = el("tr", { class: "job", "data-job": job.id },
    el("td", {}, el("span", { class: "job-name" }, name), el("code", { class: "job-id" }, job.id)),
    el("td", {}, resource),
    stateCell(job.status.state),
    el("td", {}, when(job.status.time)),
    el("td", { class: "message" }, job.status.message || ""),
    el("td", { class: "actions" }, details, fold, cancel));
  const below = openDetail ? [detailRow(job)] : [];
  if (!open) return [row, ...below];
  return [row, ...below, ...list.map((m, i) => el("tr", { class: "member", "data-member-of": job.id },
    el("td", {}, el("span", { class: "member-name" }, m.name),
      i === 0 ? el("span", { class: "primary" }, "primary") : null),
    el("td", {}, `role ${m.role} #${m.index}`),
    stateCell(m.state || job.status.state),
    el("td", {}, m.node ? `node ${m.node}` : ""),
    el("td", { class: "message" }, m.address ? `address ${m.address}` : ""),
    el("td", {})))];
}

function outputPath(job, which) {
  const meta = job.status.meta_data;
  const path = meta[`${which}_path`];
  if (!path) return null;
  return path.startsWith("/") ? path : `${meta.directory}/${path}`;
}

/** The job's state history as a timeline, and the last lines of its output files. */
function detailRow(job) {
  const history = job.status.meta_data.history || [];
  const name = (job.job_spec && job.job_spec.name) || job.id;
  const files = ["stdout", "stderr"].map((which) => {
    const path = outputPath(job, which);
    const read = outputs.get(`${job.id}:${which}`);
    if (!path || (which === "stderr" && !(read && read.text))) return null;
    return el("section", { class: `output output-${which}` },
      el("h3", {}, `${which}: last ${TAIL_LINES} lines of ${path}`),
      el("pre", { tabindex: "0", "aria-label": `${which} of ${name}` }, read === undefined ? "reading…"
        : read.error ? `not readable: ${read.error}` : read.text || "(empty)"));
  });
  return el("tr", { class: "detail", "data-detail-of": job.id },
    el("td", { colspan: 6 },
      el("section", { class: "timeline" }, el("h3", {}, "State history"),
        el("ol", {}, history.map((h) => el("li", {},
          el("time", {}, when(h.time)), " ", el("span", { class: `state state-${h.state}` },
            h.state), " ", h.message || "")))),
      files));
}

async function readOutputs(job) {
  const resource = job.status.meta_data.resource_id;
  await Promise.all(["stdout", "stderr"].map(async (which) => {
    const path = outputPath(job, which);
    if (!path) return;
    try {
      const task = await call(`/filesystem/tail/${encodeURIComponent(resource)}`,
        { method: "POST", body: { path, lines: TAIL_LINES } });
      const done = await call(`/task/${encodeURIComponent(task.task_id)}`);
      outputs.set(`${job.id}:${which}`, { text: done.result.output.content });
    } catch (error) {
      if (expired(error)) return;
      outputs.set(`${job.id}:${which}`,
        { error: error instanceof ApiError ? error.detail : error.message });
    }
  }));
}

async function toggleDetail(job) {
  if (detailed.has(job.id)) {
    detailed.delete(job.id);
  } else {
    detailed.add(job.id);
    render(true);
    await readOutputs(job);
  }
  render(true);
}

function wanted(job) {
  const state = document.getElementById("filter-state").value;
  const text = document.getElementById("filter-name").value.trim().toLowerCase();
  const name = ((job.job_spec && job.job_spec.name) || "").toLowerCase();
  const final = FINAL.has(job.status.state);
  return (state === "all" || (state === "finished") === final)
    && (!text || name.includes(text) || job.id.toLowerCase().includes(text));
}

function render(force = false) {
  const shown = jobs.filter(wanted);
  const key = JSON.stringify([shown, [...unfolded], [...detailed], [...outputs]]);
  if (!force && key === shownKey) return;
  shownKey = key;
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.key : undefined;
  document.getElementById("job-count").textContent =
    `Showing ${shown.length} of your ${jobs.length} jobs.`;
  const region = document.getElementById("jobs");
  if (!shown.length) {
    fill(region, el("p", { class: "note" }, jobs.length ? "No job matches these filters."
      : "You have no jobs yet."));
  } else {
    fill(region, el("table", { class: "jobs" },
      el("caption", {}, "Your jobs, newest first"),
      el("thead", {}, el("tr", {}, ["job", "resource", "state", "updated", "message", "actions"]
        .map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, shown.flatMap(jobRows))));
  }
  if (focused) {
    const again = region.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

function toggle(id) {
  if (unfolded.has(id)) unfolded.delete(id); else unfolded.add(id);
  render(true);
}

async function cancelJob(resource, id, name) {
  try {
    await call(`/compute/cancel/${encodeURIComponent(resource)}/${encodeURIComponent(id)}`,
      { method: "DELETE" });
    say("job-notice", `Cancel of ${name} sent; its state follows below.`);
    await refresh();
  } catch (error) {
    if (!expired(error)) say("error", `Cancel of ${name} refused: ${error.message}`);
  }
}

async function refresh() {
  const lists = await Promise.all(resources.map((r) =>
    call(`/compute/status/${encodeURIComponent(r)}?historical=true&include_spec=true&limit=1000`,
      { method: "POST", body: {} })));
  jobs = lists.flat().sort((a, b) => submitted(b) - submitted(a) || a.id.localeCompare(b.id));
  await Promise.all(jobs.filter((job) => detailed.has(job.id)).map(readOutputs));
  render();
  say("error", "");
  document.body.dataset.loaded = "true";
}

async function tick() {
  try {
    await refresh();
  } catch (error) {
    if (expired(error)) return;
    say("error", error instanceof ApiError
      ? `The gateway refused the request: ${error.message}`
      : `The gateway could not be reached (trying again): ${error.message}`);
  }
  setTimeout(tick, REFRESH_MS);
}

if (requireSignIn()) {
  // /console/jobs?job=ID (the Try a job page's link after a submission) opens that job's
  // details: its history and output.
  const asked = new URLSearchParams(location.search).get("job");
  if (asked) detailed.add(asked);
  document.getElementById("job-filters").addEventListener("input", () => render());
  document.getElementById("job-filters").addEventListener("submit", (e) => e.preventDefault());
  try {
    resources = (await call("/status/resources")).map((r) => r.id);
    await tick();
  } catch (error) {
    if (!expired(error)) say("error", `The gateway could not be reached: ${error.message}`);
  }
}

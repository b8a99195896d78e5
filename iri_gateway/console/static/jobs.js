// Jobs: the caller's jobs on every resource, newest first, one page at a time (GET
// /compute/jobs with offset, limit and the filters; the API filters, pages and counts, and
// shows only the caller's jobs). The shown page is read again when the job event stream
// (events.js) says one of the caller's jobs changed (an array's element included); while the
// stream is down, or on a server without it, the page is refreshed every few seconds instead.
// A cluster job unfolds into its members (meta_data.members), primary first. An array job
// (meta_data.array) shows its elements counted by state and unfolds into its elements, 50 to
// a page, filtered by state, each with its exit code and a Cancel while it runs or waits
// (arrays.js); an unfolded array's page of elements is read again with the page of jobs when
// the array changed. Cancel is DELETE /compute/cancel/{resource}/{id}. `?job=ID` opens that
// job's details. A running job's service ports (meta_data.ports) each get an Open button (a
// job's in its row, a member's in the member's row, and every one in the details' Service
// ports list): it asks the API for a one-time link (openJobPort) and opens it in a new tab,
// on the port proxy's own origin; the console's token never goes there.
import { ApiError, call } from "./api.js";
import { arrayPart } from "./arrays.js";
import { el, fill, say } from "./dom.js";
import { followEvents } from "./events.js";
import { expired, requireSignIn } from "./shell.js";

const REFRESH_MS = 2000;
const EVENT_BATCH_MS = 100; // events arriving together cost one read of the page
const FINAL = new Set(["completed", "failed", "canceled"]);
const TAIL_LINES = 20;
const PAGE = 50;
const unfolded = new Set();
const detailed = new Set();
const outputs = new Map();
const portNotes = new Map(); // "job:member:port" -> {place, status, text}: the last refusal
let jobs = [];
let total = 0;
let offset = 0;
let generation = 0;
let seek = null; // the job of a `?job=ID` link, until the first page has been read
let shownKey = "";
let live = false; // the event stream is open: no periodic refresh
let pendingRead = null;

/** Members in the order a person reads them: roles as the JobSpec lists them, then index. */
function members(job) {
  const listed = job.status.meta_data.members || [];
  const roles = ((job.job_spec && job.job_spec.roles) || []).map((r) => r.name);
  const rank = (m) => (roles.includes(m.role) ? roles.indexOf(m.role) : roles.length);
  return [...listed].sort((a, b) => rank(a) - rank(b) || a.index - b.index);
}

function stateCell(state, ...more) {
  return el("td", {}, el("span", { class: `state state-${state}` }, state), ...more);
}

const arrays = arrayPart({ stateCell, rerender: () => render(true), reread: () => refresh() });

/** A time of the API (seconds since the epoch, or ISO 8601) as "YYYY-MM-DD hh:mm:ss UTC". */
function when(time) {
  if (time === null || time === undefined) return "";
  const date = typeof time === "number" ? new Date(time * 1000) : new Date(time);
  return Number.isNaN(date.getTime()) ? String(time)
    : `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** The state of a job's member (`main`: the job itself). */
function memberState(job, member) {
  if (member === "main") return job.status.state;
  const found = (job.status.meta_data.members || []).find((m) => m.name === member);
  return (found && found.state) || job.status.state;
}

/** The Open button of one port, enabled while its member runs, followed by what the gateway
 * said when it last refused. `place` ("row" or "detail") keeps the two buttons of a port
 * apart (focus comes back to the one clicked); only the clicked one's note is announced. */
function portButton(job, p, place) {
  const resource = job.status.meta_data.resource_id;
  const running = memberState(job, p.member) === "active";
  const key = `${job.id}:${p.member}:${p.name}`;
  const where = p.member === "main" ? "" : ` of ${p.member}`;
  const button = el("button", { type: "button", class: "open-port",
    "data-key": `${place === "row" ? "open" : "open-detail"}:${key}`,
    "data-port": p.name, "data-member": p.member, disabled: !running || !p.url,
    title: !p.url ? "This gateway has no port proxy (its operator sets proxy_url)"
      : running ? `Open port ${p.name} (${p.port})${where} in a new tab`
        : "The port opens when it runs",
    "aria-label": `Open port ${p.name}${where} of ${job.id} in a new tab` }, `Open ${p.name}`);
  button.addEventListener("click", () => openPort(resource, job.id, p.member, p.name, place));
  const note = portNotes.get(key);
  const stale = note && note.status === 409 && running; // "not running yet", and now it runs
  return [button, note && !stale ? el("span", { class: "port-note",
    role: note.place === place ? "status" : null }, note.text) : null];
}

/** The Open buttons of one member's ports (`main`: a job without roles). */
function portButtons(job, member) {
  return (job.status.meta_data.ports || []).filter((p) => p.member === member)
    .flatMap((p) => portButton(job, p, "row"));
}

/** The details' Service ports list: every port of every member (folded or not), with its
 * number and Open button; nothing for a job without ports. */
function portsSection(job) {
  const ports = job.status.meta_data.ports || [];
  if (!ports.length) return null;
  const name = (job.job_spec && job.job_spec.name) || job.id;
  return el("section", { class: "ports" }, el("h3", {}, "Service ports"),
    el("table", { class: "ports", "aria-label": `Service ports of ${name}` },
      el("thead", {}, el("tr", {}, ["member", "port", "number", "open"]
        .map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ports.map((p) => el("tr", { "data-port-row": `${p.member}:${p.name}` },
        el("td", {}, p.member), el("td", {}, p.name), el("td", {}, String(p.port)),
        el("td", { class: "actions" }, portButton(job, p, "detail")))))));
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
    : arrays.fold(job, name, open);
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
    stateCell(job.status.state, arrays.counts(job)),
    el("td", {}, when(job.status.time)),
    el("td", { class: "message" }, job.status.message || ""),
    el("td", { class: "actions" }, details, fold, cancel, portButtons(job, "main")));
  const below = openDetail ? [detailRow(job)] : [];
  if (!open) return [row, ...below];
  if (arrays.isArray(job)) return [row, ...below, ...arrays.rows(job, name)];
  return [row, ...below, ...list.map((m, i) => el("tr", { class: "member", "data-member-of": job.id },
    el("td", {}, el("span", { class: "member-name" }, m.name),
      i === 0 ? el("span", { class: "primary" }, "primary") : null),
    el("td", {}, `role ${m.role} #${m.index}`),
    stateCell(m.state || job.status.state),
    el("td", {}, m.node ? `node ${m.node}` : ""),
    el("td", { class: "message" }, m.address ? `address ${m.address}` : ""),
    el("td", { class: "actions" }, portButtons(job, m.name))))];
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
      portsSection(job), files));
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

/** The query of the shown page: its place, the state and text filters. */
function query() {
  const state = document.getElementById("filter-state").value;
  const text = document.getElementById("filter-name").value.trim();
  const params = new URLSearchParams({ offset: String(offset), limit: String(PAGE), state,
    include_spec: "true" });
  if (text) params.set("text", text.slice(0, 200));
  return { params, filtered: state !== "all" || Boolean(text) };
}

const count = (n) => n.toLocaleString("en-US");

/** "Showing 51-100 of your 1,000 jobs." and the page buttons, enabled where there is a page. */
function pager(filtered) {
  const of = filtered ? `${count(total)} jobs matching the filters` : `your ${count(total)} jobs`;
  document.getElementById("job-count").textContent = jobs.length
    ? `Showing ${count(offset + 1)}-${count(offset + jobs.length)} of ${of}.`
    : `Showing 0 of ${of}.`;
  document.getElementById("page-previous").disabled = offset === 0;
  document.getElementById("page-next").disabled = offset + jobs.length >= total;
  document.getElementById("pager").hidden = total <= PAGE && offset === 0;
}

function render(force = false) {
  const { filtered } = query();
  const key = JSON.stringify([jobs, total, offset, filtered, [...unfolded], [...detailed],
    [...outputs], [...portNotes], arrays.shown()]);
  if (!force && key === shownKey) return;
  shownKey = key;
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.key : undefined;
  pager(filtered);
  const shown = jobs;
  const region = document.getElementById("jobs");
  if (!shown.length) {
    fill(region, el("p", { class: "note" }, filtered ? "No job matches these filters."
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

async function toggle(id) {
  if (unfolded.has(id)) unfolded.delete(id); else unfolded.add(id);
  render(true);
  const job = jobs.find((j) => j.id === id);
  if (!job || !unfolded.has(id) || !arrays.isArray(job)) return;
  await arrays.read(job);
  render(true);
}

async function cancelJob(resource, id, name) {
  try {
    await call(`/compute/cancel/${encodeURIComponent(resource)}/${encodeURIComponent(id)}`,
      { method: "DELETE" });
    say("error", "");
    say("job-notice", `Cancel of ${name} sent; its state follows below.`);
    await refresh();
  } catch (error) {
    if (!expired(error)) say("error", `Cancel of ${name} refused: ${error.message}`);
  }
}

/** Open one port in a new tab. The tab is opened now, in the click: a pop-up blocker lets
 * that through, not one opened after the API answers (so not `window.open(url, "_blank",
 * "noopener")` once the link is known; and "noopener" at once would return no handle to send
 * the tab on with). It is cut from this page (`opener`: the service's scripts get no handle
 * on the console), then sent to the one-time link. Headless Chromium tests exactly this. The
 * POST carries the token in its header; the link has none. */
async function openPort(resource, jobId, member, port, place) {
  const key = `${jobId}:${member}:${port}`;
  const tab = window.open("about:blank", "_blank");
  if (tab) tab.opener = null;
  const path = [resource, jobId, member, port].map(encodeURIComponent).join("/");
  try {
    const link = await call(`/compute/ports/${path}`, { method: "POST" });
    portNotes.delete(key);
    if (tab) tab.location.replace(link.url);
    else {
      portNotes.set(key, { place, status: 0,
        text: "the browser blocked the new tab: allow pop-ups for this page" });
    }
  } catch (error) {
    if (tab) tab.close();
    if (expired(error)) return;
    const why = error instanceof ApiError ? error.detail : error.message;
    const status = error instanceof ApiError ? error.status : 0;
    portNotes.set(key, { place, status,
      text: status === 409 ? `not running yet: ${why}` : why });
  }
  render(true);
}

/** Read the shown page again (only it: a list of any length costs one small request). */
async function refresh() {
  const mine = ++generation;
  const { params } = query();
  const page = await call(`/compute/jobs?${params}`);
  if (mine !== generation) return; // a newer request (other page or filters) answers instead
  if (!page.jobs.length && page.total && offset) {
    // The page is past the end now (jobs left the filter): show the last page instead.
    offset = Math.floor((page.total - 1) / PAGE) * PAGE;
    await refresh();
    return;
  }
  if (seek) {
    const name = document.getElementById("filter-name");
    const linked = seek;
    seek = null;
    if (!page.jobs.some((job) => job.id === linked) && !name.value) {
      name.value = linked; // an older job is not on the first page: find it by its id
      await refresh();
      return;
    }
  }
  jobs = page.jobs;
  total = page.total;
  await Promise.all([...jobs.filter((job) => detailed.has(job.id)).map(readOutputs),
    ...jobs.filter((job) => unfolded.has(job.id) && arrays.isArray(job))
      .map((job) => arrays.read(job))]);
  if (mine !== generation) return;
  render();
  if (readFailed) { // the page reads again: the earlier read's failure is over
    say("error", "");
    readFailed = false;
  }
  document.body.dataset.loaded = "true";
}

/** A failed read of the page, shown until a read succeeds; a refused cancel is not cleared
 * by the live updates that follow it (it stays until the next action), so it is read. */
let readFailed = false;
function readError(text) {
  readFailed = true;
  say("error", text);
}

/** Show the page starting at `start` (the filters as they are now). */
async function show(start) {
  offset = start;
  try {
    await refresh();
  } catch (error) {
    if (!expired(error)) readError(`The gateway refused the request: ${error.message}`);
  }
}

/** A change came on the stream: read the shown page once, soon (changes come in bursts). */
function changed() {
  if (pendingRead) return;
  pendingRead = setTimeout(async () => {
    pendingRead = null;
    try {
      await refresh();
    } catch (error) {
      if (!expired(error)) readError(`The gateway refused the request: ${error.message}`);
    }
  }, EVENT_BATCH_MS);
}

function goLive() {
  followEvents({
    onEvent: () => changed(),
    onUp: () => {
      live = true;
      document.body.dataset.live = "true";
      changed(); // what changed while the stream was down
    },
    onDown: () => {
      live = false;
      document.body.dataset.live = "false";
    },
  });
}

async function tick() {
  try {
    if (!live) await refresh();
  } catch (error) {
    if (expired(error)) return;
    readError(error instanceof ApiError
      ? `The gateway refused the request: ${error.message}`
      : `The gateway could not be reached (trying again): ${error.message}`);
  }
  setTimeout(tick, REFRESH_MS);
}

if (requireSignIn()) {
  // /console/jobs?job=ID (the Try a job page's link after a submission) opens that job's
  // details: its history and output.
  seek = new URLSearchParams(location.search).get("job");
  if (seek) detailed.add(seek);
  document.getElementById("job-filters").addEventListener("input", () => show(0));
  document.getElementById("job-filters").addEventListener("submit", (e) => e.preventDefault());
  document.getElementById("page-previous").addEventListener("click",
    () => show(Math.max(0, offset - PAGE)));
  document.getElementById("page-next").addEventListener("click", () => show(offset + PAGE));
  await tick();
  goLive();
}
